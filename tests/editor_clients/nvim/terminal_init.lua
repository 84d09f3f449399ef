-- An init for Neovim in a real terminal (tmux, test_neovim.py): the plugin on 'runtimepath', the
-- snippet on a clipboard, the server command, true colours. The user's keys come through tmux.
--   EDITAPPLY_NVIM_CONFIG=config.json nvim -u terminal_init.lua FILE      config: {plugin, cmd, snippet}
local config = vim.json.decode(table.concat(vim.fn.readfile(os.getenv("EDITAPPLY_NVIM_CONFIG")), "\n"))
local clipboard = { vim.split(config.snippet, "\n"), "v" }
vim.g.clipboard = {
  name = "terminal-test",
  copy = { ["+"] = function(lines, regtype) clipboard = { lines, regtype } end, ["*"] = function() end },
  paste = { ["+"] = function() return clipboard end, ["*"] = function() return { {}, "v" } end },
}
vim.o.termguicolors = true
vim.o.number = true
vim.o.swapfile = false
vim.cmd("syntax on")
vim.opt.rtp:prepend(config.plugin)
vim.cmd.runtime("plugin/editapply.lua")
require("editapply").setup({ cmd = config.cmd, enable = false })

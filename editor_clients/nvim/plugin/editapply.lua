-- editapply's user commands; the code is in lua/editapply/ and loads on first use.
if vim.g.loaded_editapply then
  return
end
vim.g.loaded_editapply = true

local function apply(name)
  return function(opts)
    require("editapply.apply")[name](opts)
  end
end

vim.api.nvim_create_user_command("EditApply", apply("apply"), {
  nargs = "?", range = true, complete = "buffer",
  desc = "editapply: merge a snippet into a buffer ([register] for this buffer; :'<,'>EditApply [buffer] from a selection)",
})
vim.api.nvim_create_user_command("EditApplyPreview", apply("preview"), {
  nargs = "?", range = true, complete = "buffer",
  desc = "editapply: the merge as a diff in a split; a accepts, q rejects",
})
vim.api.nvim_create_user_command("EditApplyAsk", apply("ask"), {
  nargs = "+", desc = "editapply: ask about this buffer (answered from its text)",
})
vim.api.nvim_create_user_command("EditApplyCancel", function()
  require("editapply").cancel()
end, { desc = "editapply: cancel what the server runs for this editor" })

-- vim.lsp.enable() only logs a server command it cannot run (:LspLog); say it once where the
-- user looks, when a buffer the server would start for opens.
local warned = false
vim.api.nvim_create_autocmd("FileType", {
  group = vim.api.nvim_create_augroup("editapply.command", {}),
  callback = function(ev)
    if warned or not (vim.lsp.is_enabled and vim.lsp.is_enabled("editapply")) then
      return
    end
    local config = vim.lsp.config.editapply
    if not config or type(config.cmd) ~= "table" or not vim.tbl_contains(config.filetypes or {}, vim.bo[ev.buf].filetype)
        or vim.fn.executable(config.cmd[1]) == 1 then
      return
    end
    warned = true
    vim.notify(("editapply: `%s` is not an executable (not on PATH), so the language server cannot start: install "
      .. "editapply, or require('editapply').setup({ cmd = { '/path/to/.venv/bin/editapply', 'lsp' } }) "
      .. "(:checkhealth editapply)"):format(config.cmd[1]), vim.log.levels.ERROR)
  end,
})

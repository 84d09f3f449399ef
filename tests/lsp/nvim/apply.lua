-- Headless Neovim as an editapply client: open FILE, start `editapply lsp` with the built-in
-- client (vim.lsp.start), run editapply.apply with the snippet in SNIPPET_FILE, and write what
-- came back and the buffer's lines to OUT (JSON). Neovim applies the workspace/applyEdit itself.
--   nvim --headless -u NONE -i NONE -l apply.lua FILE SNIPPET_FILE OUT EDITAPPLY ROOT
local file, snippet_file, out, editapply, root = unpack(arg)
local TIMEOUT_MS = 60000

local function finish(report)
  vim.fn.writefile({ vim.json.encode(report) }, out)
  vim.cmd("qall!")
end

vim.cmd.edit(vim.fn.fnameescape(file))
local buf = vim.api.nvim_get_current_buf()
local id = vim.lsp.start({ name = "editapply", cmd = { editapply, "lsp" }, root_dir = root,
                           init_options = { mode = "auto" } }, { bufnr = buf })
if not vim.wait(TIMEOUT_MS, function()
  local client = vim.lsp.get_client_by_id(id)
  return client ~= nil and client.initialized
end) then
  return finish({ error = "the server did not initialize" })
end

local client = vim.lsp.get_client_by_id(id)
local snippet = table.concat(vim.fn.readfile(snippet_file, "b"), "\n")
local response
client:request("workspace/executeCommand", {
  command = "editapply.apply",
  arguments = { { uri = vim.uri_from_bufnr(buf), snippet = snippet } },
}, function(err, result) response = { err = err, result = result } end, buf)
if not vim.wait(TIMEOUT_MS, function() return response ~= nil end) then
  return finish({ error = "no answer to editapply.apply" })
end
finish({
  err = response.err,
  applied = response.result and response.result.applied,
  path = response.result and response.result.path,
  lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false),
  eol = vim.bo[buf].eol,
  modified = vim.bo[buf].modified,
})

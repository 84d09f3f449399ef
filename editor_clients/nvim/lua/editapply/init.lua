-- editapply for Neovim: a thin client of `editapply lsp` (the server merges, validates and sends
-- minimal text edits; Neovim's own LSP client applies them).
--
--   require("editapply").setup({
--     cmd = { "/path/to/.venv/bin/editapply", "lsp" },    -- default: lsp/editapply.lua's
--     settings = { engineUrl = "http://127.0.0.1:8000", mode = "auto", model = "qwen2.5-coder-0.5b" },
--     register = "+",                                     -- where :EditApply takes its snippet
--   })
--
-- This module: the settings, the client for a buffer (started on demand), running a server
-- command, progress (statusline and messages) and cancel. apply.lua has the user commands,
-- health.lua `:checkhealth editapply`.
local M = {}

local NAME = "editapply"
-- The server's setting keys (lsp_server/settings.py); unset ones are sent as null (= its default).
local SETTING_KEYS = { "engine", "engineUrl", "apiKey", "model", "backend", "vllmUrl", "mode", "promptForm", "maxTokens" }

M.defaults = {
  cmd = nil, -- nil: lsp/editapply.lua's { "editapply", "lsp" }
  settings = {},
  register = "+",
  enable = true, -- vim.lsp.enable("editapply"): start with buffers of its filetypes
}
M.config = vim.deepcopy(M.defaults)

local running = {} -- request id -> client, for :EditApplyCancel
local progress = {} -- progress token -> { title, message }

--- The settings as the server takes them: every key, vim.NIL for unset ones; and `pickReadings`:
--- an ambiguous snippet's readings, and a refused model file's merge, come back to the plugin,
--- which offers them (apply.lua).
function M.server_settings(settings)
  local out = { pickReadings = true }
  for _, key in ipairs(SETTING_KEYS) do
    local value = settings[key]
    out[key] = (value == nil or value == "") and vim.NIL or value
  end
  return out
end

function M.setup(opts)
  M.config = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), opts or {})
  local settings = M.server_settings(M.config.settings)
  vim.lsp.config(NAME, { cmd = M.config.cmd, init_options = settings })
  if M.config.enable then
    vim.lsp.enable(NAME)
  end
  for _, client in ipairs(vim.lsp.get_clients({ name = NAME })) do
    client:notify("workspace/didChangeConfiguration", { settings = settings })
  end
end

--- The resolved LSP config: lsp/editapply.lua merged with setup()'s overrides.
function M.lsp_config()
  return vim.lsp.config[NAME]
end

--- Call `fn(client)` once an initialized editapply client is attached to `bufnr`, starting one
--- (or attaching the running one) when needed.
function M.with_client(bufnr, fn)
  local client = vim.lsp.get_clients({ name = NAME, bufnr = bufnr })[1]
  if client and client.initialized then
    return fn(client)
  end
  if not client then
    local config = vim.deepcopy(M.lsp_config() or {})
    if not config.cmd then
      return vim.notify("editapply: no server config: is editor_clients/nvim on 'runtimepath'?", vim.log.levels.ERROR)
    end
    config.name = NAME
    config.root_dir = config.root_dir or vim.fs.root(bufnr, config.root_markers or { ".git" })
    local id = vim.lsp.start(config, { bufnr = bufnr })
    client = id and vim.lsp.get_client_by_id(id)
    if not client then
      return vim.notify("editapply: the language server did not start (see :checkhealth editapply)", vim.log.levels.ERROR)
    end
    if client.initialized then -- a running client: it attached (and LspAttach fired) inside vim.lsp.start
      return fn(client)
    end
  end
  vim.api.nvim_create_autocmd("LspAttach", {
    buffer = bufnr,
    once = true,
    callback = function(ev)
      if ev.data.client_id == client.id then
        fn(client)
      end
    end,
  })
end

--- Tell the user why a server command failed (the server's one-line message), or that it was cancelled.
function M.failed(err)
  local cancelled = err.code == -32800
  vim.notify(cancelled and "editapply: cancelled" or ("editapply: " .. err.message:gsub("^editapply:%s*", "")),
    cancelled and vim.log.levels.INFO or vim.log.levels.ERROR)
end

--- Run the server command `command` with `args` for buffer `bufnr`; `on_result(result)` on
--- success. Failures are shown (a cancel quietly).
function M.command(bufnr, command, args, on_result)
  M.with_client(bufnr, function(client)
    local ok, id
    ok, id = client:request("workspace/executeCommand", { command = command, arguments = { args } }, function(err, result)
      running[id] = nil
      if err then
        M.failed(err)
      elseif on_result then
        on_result(result)
      end
    end, bufnr)
    if ok then
      running[id] = client
    end
  end)
end

--- Cancel every command the server runs for this editor ($/cancelRequest).
function M.cancel()
  local n = 0
  for id, client in pairs(running) do
    client:cancel_request(id)
    running[id] = nil
    n = n + 1
  end
  vim.notify(n > 0 and ("editapply: cancelling %d request%s"):format(n, n > 1 and "s" or "") or "editapply: nothing runs")
end

--- For the statusline: what the server is doing ("editapply: apply app.py 120/590 tokens · …"), or "".
function M.status()
  for _, p in pairs(progress) do
    return p.title .. (p.message and (" " .. p.message:gsub("\n.*", "")) or "")
  end
  return ""
end

--- Work-done progress of model runs: in the statusline (M.status) and the message area; the
--- start and the end are also vim.notify'd. Handlers may watch `progress_listeners`.
M.progress_listeners = {}
vim.api.nvim_create_autocmd("LspProgress", {
  group = vim.api.nvim_create_augroup("editapply.progress", {}),
  callback = function(ev)
    local client = vim.lsp.get_client_by_id(ev.data.client_id)
    if not client or client.name ~= NAME then
      return
    end
    local token, value = ev.data.params.token, ev.data.params.value
    if value.kind == "begin" then
      progress[token] = { title = value.title, message = value.message }
      vim.notify(value.title .. " (:EditApplyCancel to stop)")
    elseif value.kind == "report" and progress[token] then
      progress[token].message = value.message
      vim.api.nvim_echo({ { progress[token].title .. " " .. (value.message or ""):gsub("\n.*", "") } }, false, {})
    elseif value.kind == "end" then
      local title = progress[token] and progress[token].title or "editapply"
      progress[token] = nil
      if value.message ~= "failed" then -- a failure is the command's error, shown by M.failed
        vim.notify(title .. ": " .. (value.message or "done"))
      end
    end
    for _, listener in ipairs(M.progress_listeners) do
      listener(token, value)
    end
    vim.cmd.redrawstatus()
  end,
})

return M

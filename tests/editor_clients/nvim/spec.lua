-- Headless Neovim running the editapply plugin the way a user does (its user commands, against the
-- real `editapply lsp`), then writing what it saw to a JSON report for test_neovim.py.
--   nvim --headless -u NONE -i NONE -n -l spec.lua SCENARIO CONFIG.json
-- CONFIG: {plugin, out, file?, snippet?, language?, question?, cmd?, settings?, pick?, chat?,
-- chat_line?, other?}. Scenarios:
--   apply      the snippet on the clipboard ("+"), :EditApply in the file's buffer
--   selection  the snippet in a chat buffer's fenced block, selected, :'<,'>EditApply (the file's
--              buffer is in the previous window)
--   preview    :EditApplyPreview, the report taken before and after `a` in the diff window
--   reject     :EditApplyPreview, then `q`
--   health     :checkhealth editapply
--   ask        :EditApplyAsk {question} (the model): the answer in a split, progress on the way
--   cancel     :EditApply on the model path, :EditApplyCancel at its first progress report
--   second_buffer  :EditApply in the file's buffer while the server already runs for `other`'s
--   readings   an ambiguous snippet: :EditApply, the pick (vim.ui.select) cancelled; then again,
--              reading `pick` chosen
--   readings_preview      :EditApplyPreview, reading `pick` chosen: its diff, then `a`
--   readings_code_action  the server's code action on a chat file's fenced block (`chat`, the
--                         cursor on line `chat_line`), reading `pick` chosen
--   help       :help editapply
--   enable     setup() with `cmd` and enable, then the file opened (a missing command is said)
--   no_clipboard  :EditApply with no clipboard provider (config.no_clipboard: no fake one)
--   file_target   a chat buffer's selection, :'<,'>EditApply {file} for a file not loaded yet
--   narrow     :EditApplyPreview in a window `columns` wide
--   readme     the README's plain-Neovim block (`code`), the snippet in register "s"
--   hunks      :EditApplyPreview, `s` on the line `accept` names, then `x` on the line `reject` names
--   candidate  :EditApply on the model path whose file fails validation: item `pick` of the review
--              offer (vim.ui.select), its preview, then `a`
local scenario, config_path = arg[1], arg[2]
local config = vim.json.decode(table.concat(vim.fn.readfile(config_path), "\n"))
local TIMEOUT_MS = 60000
local report = { messages = {} }

local function finish(extra)
  report = vim.tbl_extend("force", report, extra or {})
  vim.fn.writefile({ vim.json.encode(report) }, config.out)
  vim.cmd("qall!")
end

-- A clipboard as a desktop has one (headless Neovim has no provider).
local clipboard = { {}, "v" }
if not config.no_clipboard then
  vim.g.clipboard = {
    name = "spec",
    copy = { ["+"] = function(lines, regtype) clipboard = { lines, regtype } end, ["*"] = function() end },
    paste = { ["+"] = function() return clipboard end, ["*"] = function() return { {}, "v" } end },
  }
end

-- What the plugin tells the user.
vim.notify = function(message, level)
  table.insert(report.messages, { message = message, level = level or vim.log.levels.INFO })
end

-- nil once `predicate` holds, else the report's error.
local function wait(what, predicate)
  return not vim.wait(TIMEOUT_MS, predicate, 20) and { error = "timed out waiting for " .. what } or nil
end

local function said(pattern)
  for _, m in ipairs(report.messages) do
    if m.message:find(pattern) then
      return m
    end
  end
end

local function failed()
  for _, m in ipairs(report.messages) do
    if m.level >= vim.log.levels.WARN then
      return m
    end
  end
end

local function buffer(buf)
  return { lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false), eol = vim.bo[buf].eol, modified = vim.bo[buf].modified }
end

vim.opt.rtp:prepend(config.plugin)
vim.cmd.runtime("plugin/editapply.lua")
require("editapply").setup({ cmd = config.cmd, settings = config.settings or {}, enable = false })

if scenario == "health" then
  vim.cmd("checkhealth editapply")
  return finish({ health = vim.api.nvim_buf_get_lines(0, 0, -1, false) })
end

if scenario == "help" then
  vim.cmd("help editapply")
  return finish({ help = { name = vim.api.nvim_buf_get_name(0), line = vim.api.nvim_get_current_line() } })
end

if scenario == "enable" then
  vim.cmd("filetype on") -- as in any user's Neovim (-u NONE leaves it off); vim.lsp.enable needs it
  require("editapply").setup({ cmd = config.cmd, enable = true })
  vim.cmd.edit(vim.fn.fnameescape(config.file))
  vim.wait(2000, failed, 20)
  return finish({ clients = #vim.lsp.get_clients({ name = "editapply", _uninitialized = true }) })
end

if scenario == "readme" then
  vim.cmd.edit(vim.fn.fnameescape(config.file))
  local target = vim.api.nvim_get_current_buf()
  vim.fn.setreg("s", config.snippet)
  local ok, err = pcall(assert(loadstring(config.code)))
  if not ok then
    return finish({ error = "the README's block failed: " .. tostring(err) })
  end
  local timeout = wait("the README's apply", function() return vim.bo[target].modified end)
  return finish(timeout or { after = buffer(target) })
end

vim.cmd.edit(vim.fn.fnameescape(config.file))
local target = vim.api.nvim_get_current_buf()

if scenario == "apply" then
  vim.fn.setreg("+", config.snippet)
  vim.cmd("EditApply")
  local timeout = wait("the apply", function() return said("applied") or failed() end)
  return finish(timeout or { after = buffer(target) })
end

if scenario == "second_buffer" then
  -- The client runs, attached to another buffer only (setup's enable = false): :EditApply here
  -- attaches it to this one.
  local started = false
  vim.cmd("split " .. vim.fn.fnameescape(config.other))
  require("editapply").with_client(vim.api.nvim_get_current_buf(), function() started = true end)
  local timeout = wait("the server", function() return started end)
  if timeout then
    return finish(timeout)
  end
  vim.cmd.wincmd("p")
  vim.fn.setreg("+", config.snippet)
  vim.cmd("EditApply")
  timeout = wait("the apply", function() return said("applied") or failed() end)
  return finish(timeout or { after = buffer(target) })
end

if scenario == "selection" then
  -- A chat pane in a split above, its answer's fenced block selected linewise.
  vim.cmd("aboveleft new")
  local chat = vim.api.nvim_get_current_buf()
  local lines = vim.list_extend({ "Here is the change:", "", "```" .. (config.language or "") },
    vim.split(config.snippet, "\n", { trimempty = true }))
  vim.list_extend(lines, { "```", "", "That is all." })
  vim.api.nvim_buf_set_lines(chat, 0, -1, false, lines)
  vim.cmd("normal! 3GV" .. (#lines - 2) .. "G\27") -- from fence to fence
  vim.cmd("'<,'>EditApply")
  local timeout = wait("the apply", function() return said("applied") or failed() end)
  return finish(timeout or { after = buffer(target), chat = buffer(chat) })
end

if scenario == "no_clipboard" then
  vim.cmd("EditApply")
  return finish({ after = buffer(target) })
end

if scenario == "file_target" then
  -- The file's buffer is wiped: :'<,'>EditApply names the file, which is loaded for the edit.
  vim.cmd("enew")
  vim.cmd.bwipeout(target)
  local chat = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_lines(chat, 0, -1, false, vim.split(config.snippet, "\n", { trimempty = true }))
  vim.cmd("normal! ggVG\27")
  vim.cmd("'<,'>EditApply " .. vim.fn.fnameescape(config.file))
  local timeout = wait("the apply", function() return said("applied") or failed() end)
  local buf = vim.fn.bufnr(config.file)
  return finish(timeout or { after = buf > 0 and buffer(buf) or nil, listed = buf > 0 and vim.bo[buf].buflisted })
end

if scenario == "narrow" then
  vim.o.columns = config.columns
  vim.fn.setreg("+", config.snippet)
  vim.cmd("EditApplyPreview")
  local timeout = wait("the preview window", function() return vim.bo.filetype == "diff" end)
  return finish(timeout or { winbar = vim.wo.winbar, width = vim.api.nvim_win_get_width(0) })
end

if scenario == "hunks" then
  vim.fn.setreg("+", config.snippet)
  vim.cmd("EditApplyPreview")
  local timeout = wait("the preview window", function() return vim.bo.filetype == "diff" or failed() end)
  if timeout or failed() then
    return finish(timeout)
  end
  local preview = vim.api.nvim_get_current_buf()
  local function on_line(text, key)
    vim.fn.cursor(vim.fn.index(vim.api.nvim_buf_get_lines(preview, 0, -1, false), text) + 1, 1)
    vim.cmd("normal " .. key)
  end
  report.before = vim.api.nvim_buf_get_lines(preview, 0, -1, false)
  on_line(config.accept, "s")
  timeout = wait("the accepted change", function()
    return said("applied") and not vim.tbl_contains(vim.api.nvim_buf_get_lines(preview, 0, -1, false), config.accept)
  end)
  if timeout then
    return finish(timeout)
  end
  report.left = vim.api.nvim_buf_get_lines(preview, 0, -1, false)
  report.during = buffer(target)
  on_line(config.reject, "x")
  timeout = wait("the review's end", function() return said("reviewed") or failed() end)
  return finish(timeout or { after = buffer(target), windows_after = #vim.api.nvim_tabpage_list_wins(0) })
end

if scenario == "preview" or scenario == "reject" then
  vim.fn.setreg("+", config.snippet)
  vim.cmd("EditApplyPreview")
  local timeout = wait("the preview window", function() return vim.bo.filetype == "diff" or failed() end)
  if timeout or failed() then
    return finish(timeout)
  end
  report.preview = {
    lines = vim.api.nvim_buf_get_lines(0, 0, -1, false),
    winbar = vim.wo.winbar,
    windows = #vim.api.nvim_tabpage_list_wins(0),
  }
  report.during = buffer(target)
  vim.cmd("normal " .. (scenario == "preview" and "a" or "q")) -- the preview's own mappings
  if scenario == "preview" then
    timeout = wait("the accepted edit", function() return said("applied") or failed() end)
  end
  return finish(timeout or { after = buffer(target), windows_after = #vim.api.nvim_tabpage_list_wins(0) })
end

-- An ambiguous snippet: vim.ui.select answered as the user would (`answer`: the item's number, or
-- nil to cancel), what it was asked recorded.
local answer
report.picks = {}
vim.ui.select = function(items, opts, on_choice)
  local shown = vim.tbl_map(opts.format_item, items)
  table.insert(report.picks, { prompt = opts.prompt, items = shown })
  on_choice(items[answer], answer)
end

if scenario == "readings" then
  vim.fn.setreg("+", config.snippet)
  vim.cmd("EditApply")
  local timeout = wait("the pick", function() return #report.picks == 1 or failed() end)
  if timeout or failed() then
    return finish(timeout)
  end
  vim.wait(500) -- an edit would land by now
  report.cancelled = buffer(target)
  answer = config.pick
  vim.cmd("EditApply")
  timeout = wait("the picked reading", function() return said("applied") or failed() end)
  return finish(timeout or { after = buffer(target) })
end

if scenario == "readings_preview" then
  answer = config.pick
  vim.fn.setreg("+", config.snippet)
  vim.cmd("EditApplyPreview")
  local timeout = wait("the preview window", function() return vim.bo.filetype == "diff" or failed() end)
  if timeout or failed() then
    return finish(timeout)
  end
  report.preview = { lines = vim.api.nvim_buf_get_lines(0, 0, -1, false), winbar = vim.wo.winbar }
  report.during = buffer(target)
  vim.cmd("normal a")
  timeout = wait("the accepted reading", function() return said("applied") or failed() end)
  return finish(timeout or { after = buffer(target) })
end

if scenario == "readings_code_action" then
  answer = config.pick
  local editapply = require("editapply")
  -- The target is open in the server (its version is what applyMerged checks), then the chat file.
  editapply.with_client(target, function()
    vim.cmd("aboveleft split " .. vim.fn.fnameescape(config.chat))
    local chat = vim.api.nvim_get_current_buf()
    vim.api.nvim_win_set_cursor(0, { config.chat_line, 0 })
    editapply.with_client(chat, function()
      vim.lsp.buf.code_action({ apply = true })
    end)
  end)
  local timeout = wait("the picked reading", function() return said("applied") or failed() end)
  return finish(timeout or { after = buffer(target) })
end

if scenario == "candidate" then
  answer = config.pick
  vim.fn.setreg("+", config.snippet)
  vim.cmd("EditApply")
  local timeout = wait("the preview window", function() return vim.bo.filetype == "diff" or failed() end)
  if timeout or failed() then
    return finish(timeout)
  end
  report.preview = { lines = vim.api.nvim_buf_get_lines(0, 0, -1, false), winbar = vim.wo.winbar }
  report.during = buffer(target)
  vim.cmd("normal a")
  timeout = wait("the accepted merge", function() return said("applied") or failed() end)
  return finish(timeout or { after = buffer(target) })
end

-- Model runs (the CI model): what the progress looked like to the user.
local editapply = require("editapply")
local reports = {}
table.insert(editapply.progress_listeners, function(_, value)
  if value.kind == "report" and (value.message or ""):find("tok/s") then
    table.insert(reports, { message = value.message, status = editapply.status() })
  end
end)

if scenario == "ask" then
  vim.cmd("EditApplyAsk " .. config.question)
  local current = vim.api.nvim_get_current_buf() == target
  local answer_buf = vim.fn.bufnr("^editapply://ask/")
  local timeout = wait("the answer", function() return said("^editapply: ask .*tokens/step") or failed() end)
  return finish(timeout or { answer = buffer(answer_buf), reports = reports, current = current })
end

if scenario == "cancel" then
  vim.fn.setreg("+", config.snippet)
  vim.cmd("EditApply")
  local timeout = wait("a progress report", function() return #reports > 0 or failed() end)
  if timeout or failed() then
    return finish(timeout)
  end
  vim.cmd("EditApplyCancel")
  -- The request's answer (RequestCancelled) is not passed on by Neovim; the progress ends "cancelled".
  timeout = wait("the cancel", function() return said(": cancelled$") or failed() end)
  return finish(timeout or { after = buffer(target), reports = reports, status_after = editapply.status() })
end

finish({ error = "unknown scenario " .. tostring(scenario) })

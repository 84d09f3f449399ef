-- The user commands (plugin/editapply.lua defines them):
--
--   :EditApply [x]               the snippet in register x (default: setup's `register`, "+")
--                                merged into the current buffer
--   :'<,'>EditApply [buffer]     the selection of this buffer (a chat pane, a scratch buffer)
--                                merged into another buffer: the one named, else the buffer of
--                                the previous window, else the alternate buffer
--   :EditApplyPreview ...        the same, shown as a diff in a split: `a` accepts, `q` rejects;
--                                the buffer is left alone until accepted
--   :EditApplyAsk {question}     an answer drafted from the current buffer's text, in a split
--
-- The server does the work: `editapply.apply` sends the edit back as workspace/applyEdit (minimal
-- text edits, versioned), which Neovim applies; a preview's Accept is `editapply.applyMerged`.
local editapply = require("editapply")

local M = {}

local function notify(message, level)
  vim.notify("editapply: " .. message, level or vim.log.levels.INFO)
end

local function is_target(buf, from)
  return buf > 0 and buf ~= from and vim.api.nvim_buf_is_loaded(buf) and vim.bo[buf].buftype == ""
end

--- The buffer a selection is applied to: `name` (a buffer number or name), else the previous
--- window's buffer, else the alternate buffer.
local function other_buffer(name, from)
  if name ~= "" then
    local buf = vim.fn.bufnr(tonumber(name) or name)
    return is_target(buf, from) and buf or nil, ("no loaded buffer %q to apply to"):format(name)
  end
  for _, buf in ipairs({ vim.fn.winbufnr(vim.fn.winnr("#")), vim.fn.bufnr("#") }) do
    if is_target(buf, from) then
      return buf
    end
  end
  return nil, "which buffer? :'<,'>EditApply {buffer}, or show it in the previous window"
end

--- The selected text: the visual selection when the range is it, else the range's lines.
local function selection(opts)
  local first, last = vim.fn.getpos("'<"), vim.fn.getpos("'>")
  if first[2] == opts.line1 and last[2] == opts.line2 and vim.fn.visualmode() ~= "" then
    return table.concat(vim.fn.getregion(first, last, { type = vim.fn.visualmode() }), "\n") .. "\n"
  end
  return table.concat(vim.api.nvim_buf_get_lines(0, opts.line1 - 1, opts.line2, false), "\n") .. "\n"
end

--- { target = bufnr, snippet = string } for a command's arguments, or nil and why.
function M.resolve(opts)
  local here = vim.api.nvim_get_current_buf()
  if opts.range > 0 then
    local target, why = other_buffer(opts.args, here)
    return target and { target = target, snippet = selection(opts) }, why
  end
  local register = opts.args ~= "" and opts.args or editapply.config.register
  local ok, snippet = pcall(vim.fn.getreg, register)
  if not ok or type(snippet) ~= "string" or vim.trim(snippet) == "" then
    return nil, ("register %s is empty: yank the snippet into it first"):format(register)
  end
  return { target = here, snippet = snippet }
end

local function file(buf)
  local name = vim.api.nvim_buf_get_name(buf)
  return name ~= "" and vim.fn.fnamemodify(name, ":~:.") or ("buffer " .. buf)
end

local function args(job)
  return { uri = vim.uri_from_bufnr(job.target), snippet = job.snippet }
end

function M.apply(opts)
  local job, why = M.resolve(opts)
  if not job then
    return notify(why, vim.log.levels.WARN)
  end
  editapply.command(job.target, "editapply.apply", args(job), function(result)
    if not result.applied then
      notify("nothing applied to " .. file(job.target))
    elseif (result.edits or 0) == 0 then
      notify(file(job.target) .. " already matches the edit")
    else
      notify(("applied %d edit%s to %s (%s)"):format(result.edits, result.edits == 1 and "" or "s", file(job.target),
        result.path == "model" and "the model" or "deterministic merge"))
    end
  end)
end

local function validation_line(validation)
  if validation.ok then
    return "validation ok"
  end
  local reasons = {}
  for _, p in ipairs(validation.problems or {}) do
    if p.severity == "error" then
      table.insert(reasons, p.reason or p.name)
    end
  end
  return "validation FAILED: " .. table.concat(reasons, "; ")
end

--- A scratch buffer in a split below the current window, holding `lines`.
local function scratch(name, filetype, lines)
  vim.cmd("belowright new")
  local buf = vim.api.nvim_get_current_buf()
  vim.bo[buf].buftype, vim.bo[buf].bufhidden, vim.bo[buf].swapfile = "nofile", "wipe", false
  pcall(vim.api.nvim_buf_set_name, buf, name)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].filetype, vim.bo[buf].modifiable = filetype, false
  return buf, vim.api.nvim_get_current_win()
end

function M.preview(opts)
  local job, why = M.resolve(opts)
  if not job then
    return notify(why, vim.log.levels.WARN)
  end
  editapply.command(job.target, "editapply.preview", args(job), function(result)
    if result.diff == "" then
      return notify(file(job.target) .. " already matches the edit")
    end
    local lines = vim.split(result.diff, "\n", { trimempty = true })
    local buf, win = scratch("editapply://preview/" .. file(job.target), "diff", lines)
    vim.api.nvim_win_set_height(win, math.min(#lines + 1, math.floor(vim.o.lines * 0.6)))
    vim.wo[win].number, vim.wo[win].relativenumber, vim.wo[win].signcolumn = false, false, "no"
    vim.wo[win].winbar = ("editapply preview of %s · %s · a accept · q reject"):format(
      file(job.target), validation_line(result.validation))
    local function close()
      if vim.api.nvim_win_is_valid(win) then
        vim.api.nvim_win_close(win, true)
      end
    end
    vim.keymap.set("n", "q", close, { buffer = buf, desc = "editapply: reject the preview" })
    vim.keymap.set("n", "a", function()
      editapply.command(job.target, "editapply.applyMerged",
        { uri = result.uri, version = result.version, merged = result.merged }, function(applied)
          close()
          notify(("applied %d edit%s to %s"):format(applied.edits, applied.edits == 1 and "" or "s", file(job.target)))
        end)
    end, { buffer = buf, desc = "editapply: accept the preview" })
  end)
end

local current_ask -- the answer buffer of the latest ask: the one progress reports stream into

function M.ask(opts)
  local target = vim.api.nvim_get_current_buf()
  local header = { "# " .. opts.args, "" }
  local buf = scratch("editapply://ask/" .. file(target), "markdown", vim.list_extend(vim.deepcopy(header), { "…" }))
  local function show(text)
    if vim.api.nvim_buf_is_valid(buf) then
      vim.bo[buf].modifiable = true
      vim.api.nvim_buf_set_lines(buf, 0, -1, false, vim.list_extend(vim.deepcopy(header), vim.split(text, "\n")))
      vim.bo[buf].modifiable = false
    end
  end
  current_ask = buf
  -- The answer streams in the progress reports: "figures\nanswer so far".
  local function listener(_, value)
    if current_ask == buf and value.kind == "report" and value.message and value.message:find("\n") then
      show(value.message:gsub("^[^\n]*\n", ""))
    end
  end
  table.insert(editapply.progress_listeners, listener)
  vim.cmd.wincmd("p")
  editapply.command(target, "editapply.ask", { question = opts.args, uri = vim.uri_from_bufnr(target) }, function(result)
    show(result.answer)
  end)
  -- Stop listening once the answer's buffer is gone.
  vim.api.nvim_create_autocmd("BufWipeout", {
    buffer = buf,
    once = true,
    callback = function()
      for i, l in ipairs(editapply.progress_listeners) do
        if l == listener then
          table.remove(editapply.progress_listeners, i)
        end
      end
    end,
  })
end

return M

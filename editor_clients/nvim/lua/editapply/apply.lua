-- The user commands (plugin/editapply.lua defines them):
--
--   :EditApply [x]               the snippet in register x (default: setup's `register`, "+")
--                                merged into the current buffer
--   :'<,'>EditApply [buffer]     the selection of this buffer (a chat pane, a scratch buffer)
--                                merged into another buffer: the one named, else the buffer of
--                                the previous window, else the alternate buffer
--   :EditApplyPreview ...        the same, shown as a diff in a split: `a` accepts, `q` rejects;
--                                `s` / `x` accept / reject the change under the cursor; the
--                                buffer is left alone until accepted
--   :EditApplyAsk {question}     an answer drafted from the current buffer's text, in a split
--
-- The server does the work: `editapply.apply` sends the edit back as workspace/applyEdit (minimal
-- text edits, versioned), which Neovim applies; a preview's Accept is `editapply.applyMerged`.
-- A snippet the server can read several ways comes back unapplied with its readings (the plugin
-- sends `pickReadings`): vim.ui.select offers them, and the one chosen goes through applyMerged
-- (a preview shows it first). So does a model's file that failed validation where the deterministic
-- merge validated (its `candidate`): vim.ui.select offers the merge, marked as not confirmed by the
-- model, or the model's text, as a preview; neither is applied unseen.
local editapply = require("editapply")

local M = {}

local function notify(message, level)
  vim.notify("editapply: " .. message, level or vim.log.levels.INFO)
end

local function is_target(buf, from)
  return buf > 0 and buf ~= from and vim.api.nvim_buf_is_loaded(buf) and vim.bo[buf].buftype == ""
end

--- The buffer a selection is applied to: `name` (a buffer number or name, or a file, which is
--- loaded), else the previous window's buffer, else the alternate buffer.
local function other_buffer(name, from)
  if name ~= "" then
    local buf = vim.fn.bufnr(tonumber(name) or name)
    if buf < 0 and not tonumber(name) and vim.fn.filereadable(name) == 1 then
      buf = vim.fn.bufadd(name)
      vim.bo[buf].buflisted = true
      vim.fn.bufload(buf)
    end
    return is_target(buf, from) and buf or nil, ("no buffer or readable file %q to apply to"):format(name)
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
  if (register == "+" or register == "*") and vim.fn.has("clipboard") == 0 then
    return nil, ("register %s is the clipboard, and Neovim has no clipboard provider (:help clipboard): install "
      .. "xclip, xsel or wl-clipboard, name another register (:EditApply a), or select the snippet and "
      .. ":'<,'>EditApply"):format(register)
  end
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

--- The readings an apply or preview result leaves to the user: an ambiguous snippet's, when
--- nothing chose one (validation failed, nothing applied); nil when the model picked one itself.
local function readings_to_pick(result)
  local readings = result.readings
  if result.applied ~= true and not result.validation.ok and type(readings) == "table" and #readings > 0 then
    return readings
  end
end

--- The deterministic merge a result leaves for review: a model's file failed validation (nothing
--- applied) where the merge validated; nil otherwise.
local function candidate_to_review(result)
  if result.applied ~= true and not result.validation.ok and type(result.candidate) == "table" then
    return result.candidate
  end
end

local review_candidate -- below, with the preview it opens

--- "+0 −1 lines": what a reading's unified diff changes (its hunks, not its ---/+++ header).
local function changes(diff)
  local added, removed, in_hunk = 0, 0, false
  for _, line in ipairs(vim.split(diff, "\n")) do
    if vim.startswith(line, "@@") then
      in_hunk = true
    elseif in_hunk and vim.startswith(line, "+") then
      added = added + 1
    elseif in_hunk and vim.startswith(line, "-") then
      removed = removed + 1
    end
  end
  return added + removed == 0 and "no change" or ("+%d −%d lines"):format(added, removed)
end

--- Ask which reading of buffer `target`'s snippet is meant; `on_pick(reading, n)`, nothing on cancel.
local function pick_reading(target, readings, on_pick)
  vim.ui.select(readings, {
    prompt = ("editapply: the snippet can be read %d ways in %s; which is meant?"):format(#readings, file(target)),
    kind = "editapply.reading",
    format_item = function(r)
      local logprob = type(r.logprob) == "number" and (", log p %.2f"):format(r.logprob) or ""
      return ("%s (%s%s)"):format(r.label, changes(r.diff), logprob)
    end,
  }, function(reading, n)
    if reading then
      on_pick(reading, n)
    end
  end)
end

--- Say that `edits` edits were applied to buffer `target` (`how`: by which path, when known).
local function done(target, edits, how)
  if edits == 0 then
    return notify(file(target) .. " already matches the edit")
  end
  notify(("applied %d edit%s to %s%s"):format(edits, edits == 1 and "" or "s", file(target), how and (" (" .. how .. ")") or ""))
end

--- Apply `merged` to buffer `target` if it is still at `result`'s version; `on_applied()` after.
local function apply_merged(target, result, merged, on_applied)
  editapply.command(target, "editapply.applyMerged", { uri = result.uri, version = result.version, merged = merged },
    function(applied)
      if on_applied then
        on_applied()
      end
      done(target, applied.edits)
    end)
end

--- What an `editapply.apply` result asks of the user: an ambiguous snippet's reading to pick
--- (applied once picked), else nothing but a message saying what was done.
function M.applied(target, result)
  local readings, candidate = readings_to_pick(result), candidate_to_review(result)
  if (readings or candidate) and result.version == vim.NIL then -- a file the server read from disk: applyMerged needs it open
    local what = readings and ("the snippet can be read %d ways"):format(#readings) or "the model's edit failed validation"
    notify(("%s: open %s and apply it again to choose"):format(what, file(target)), vim.log.levels.WARN)
  elseif readings then
    pick_reading(target, readings, function(reading)
      apply_merged(target, result, reading.merged)
    end)
  elseif candidate then
    review_candidate(target, result, candidate)
  elseif not result.applied then
    notify("nothing applied to " .. file(target))
  else
    done(target, result.edits or 0,
      ({ model = "the model", ranked = "the reading the model chose" })[result.path] or "deterministic merge")
  end
end

function M.apply(opts)
  local job, why = M.resolve(opts)
  if not job then
    return notify(why, vim.log.levels.WARN)
  end
  editapply.command(job.target, "editapply.apply", args(job), function(result)
    M.applied(job.target, result)
  end)
end

--- workspace/executeCommand's answer when the request had no callback of ours: the server's code
--- action ("Apply this snippet to FILE") runs `editapply.apply` so (lsp/editapply.lua's handler).
function M.command_result(err, result, ctx)
  if err then
    return editapply.failed(err)
  end
  if ctx.params.command == "editapply.apply" and type(result) == "table" then
    M.applied(vim.uri_to_bufnr(result.uri), result)
  end
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

--- The review of a merged text for buffer `target` (`{uri, version, merged, diff, hunks}`, as
--- editapply.preview and editapply.hunks give it) in a split: `a` applies it all, `q` closes it;
--- `s` applies the change under the cursor and `x` drops it, and the split then shows what is
--- left (per-hunk review). `status` goes in the winbar.
local function show_preview(target, review, status)
  if review.diff == "" then
    return notify(file(target) .. " already matches the edit")
  end
  local lines = vim.split(review.diff, "\n", { trimempty = true })
  local buf, win = scratch("editapply://preview/" .. file(target), "diff", lines)
  vim.api.nvim_win_set_height(win, math.min(#lines + 1, math.floor(vim.o.lines * 0.6)))
  vim.wo[win].number, vim.wo[win].relativenumber, vim.wo[win].signcolumn = false, false, "no"
  -- The keys, the status, the file where there is room: a status longer than the window is cut
  -- at its end (Neovim would cut the winbar's left end) and also given as a message. The winbar
  -- is a 'statusline' format: % doubled.
  local width, keys = vim.api.nvim_win_get_width(win), "a accept · q reject · s/x this change · "
  local room = width - vim.fn.strdisplaywidth(keys)
  local bar = keys .. status
  if vim.fn.strdisplaywidth(status) > room then
    bar = keys .. vim.fn.strcharpart(status, 0, math.max(room - 1, 0)) .. "…"
    notify("preview of " .. file(target) .. ": " .. status)
  elseif vim.fn.strdisplaywidth(bar .. " · editapply preview of " .. file(target)) <= width then
    bar = bar .. " · editapply preview of " .. file(target)
  end
  vim.wo[win].winbar = bar:gsub("%%", "%%%%")
  local function close()
    if vim.api.nvim_win_is_valid(win) then
      vim.api.nvim_win_close(win, true)
    end
  end
  local function show(next_review) -- what is left to review
    review = next_review
    if #review.hunks == 0 or not vim.api.nvim_buf_is_valid(buf) then
      close()
      return notify("every change to " .. file(target) .. " reviewed")
    end
    vim.bo[buf].modifiable = true
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, vim.split(review.diff, "\n", { trimempty = true }))
    vim.bo[buf].modifiable = false
  end
  local function change_at_cursor(then_do)
    local row = vim.api.nvim_win_get_cursor(0)[1] - 1
    for k, h in ipairs(review.hunks) do
      if h.diffRows[1] <= row and row <= h.diffRows[2] then
        return then_do(k - 1)
      end
    end
    notify("no change under the cursor: put it on a - or + line", vim.log.levels.WARN)
  end
  local function reviewed(drop)
    editapply.command(target, "editapply.hunks", { uri = review.uri, merged = review.merged, drop = drop }, show)
  end
  vim.keymap.set("n", "q", close, { buffer = buf, desc = "editapply: reject the preview" })
  vim.keymap.set("n", "a", function()
    apply_merged(target, review, review.merged, close)
  end, { buffer = buf, desc = "editapply: accept the preview" })
  vim.keymap.set("n", "s", function()
    change_at_cursor(function(k)
      editapply.command(target, "editapply.applyMerged",
        { uri = review.uri, version = review.version, merged = review.merged, hunks = { k } }, function(applied)
          done(target, applied.edits)
          reviewed(nil)
        end)
    end)
  end, { buffer = buf, desc = "editapply: accept the change under the cursor" })
  vim.keymap.set("n", "x", function()
    change_at_cursor(function(k)
      reviewed({ k })
    end)
  end, { buffer = buf, desc = "editapply: reject the change under the cursor" })
end

--- A model's file that failed validation where the deterministic merge validated: vim.ui.select
--- offers the merge (not confirmed by the model) or the model's text, shown as a preview.
review_candidate = function(target, result, candidate)
  local model = validation_line(result.validation)
  local choices = {
    { merged = candidate.merged, item = ("the merge: %s (%s)"):format(candidate.label, changes(candidate.diff)),
      status = "merge not confirmed by the model" },
    { merged = result.merged, item = "the model's text: " .. model, status = "the model's text · " .. model },
  }
  vim.ui.select(choices, {
    prompt = ("editapply: the model's edit of %s failed validation; review which?"):format(file(target)),
    kind = "editapply.candidate",
    format_item = function(c)
      return c.item
    end,
  }, function(choice)
    if choice then
      editapply.command(target, "editapply.hunks", { uri = result.uri, merged = choice.merged }, function(review)
        show_preview(target, review, choice.status)
      end)
    end
  end)
end

function M.preview(opts)
  local job, why = M.resolve(opts)
  if not job then
    return notify(why, vim.log.levels.WARN)
  end
  editapply.command(job.target, "editapply.preview", args(job), function(result)
    local readings, candidate = readings_to_pick(result), candidate_to_review(result)
    if candidate then
      return review_candidate(job.target, result, candidate)
    end
    if not readings then
      return show_preview(job.target, result, validation_line(result.validation))
    end
    pick_reading(job.target, readings, function(reading, n)
      editapply.command(job.target, "editapply.hunks", { uri = result.uri, merged = reading.merged }, function(review)
        show_preview(job.target, review, ("reading %d of %d"):format(n, #readings))
      end)
    end)
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

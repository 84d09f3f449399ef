-- :checkhealth editapply -- Neovim's version, the server command, and what the server itself says
-- (`editapply.status`, asked of a short-lived server started with the same command and settings):
-- its version, settings it refused, the engine's reachability and the model.
local M = {}

local STATUS_TIMEOUT_MS = 60000 -- the server's first start imports the engine's Python modules

local function install_advice(cmd)
  return {
    "Install editapply so that `editapply` is on PATH (in its repository: `make install`, then add .venv/bin to PATH)",
    ("or point the plugin at it: require('editapply').setup({ cmd = { '/path/to/.venv/bin/editapply', 'lsp' } }) (now: %s)")
      :format(table.concat(cmd, " ")),
  }
end

--- Start the server over stdio, initialize it with `init_options`, ask editapply.status, shut it
--- down. Returns status, messages (window/showMessage texts), error.
local function ask_status(cmd, init_options)
  local done, status, failure, messages = false, nil, nil, {}
  local ok, rpc = pcall(vim.lsp.rpc.start, cmd, {
    notification = function(method, params)
      if method == "window/showMessage" then
        table.insert(messages, params.message)
      end
    end,
    server_request = function()
      return vim.NIL
    end,
    on_exit = function(code)
      if not done then
        failure, done = ("the server exited (code %d) before answering"):format(code), true
      end
    end,
  })
  if not ok then
    return nil, messages, tostring(rpc)
  end
  rpc.request("initialize", {
    processId = vim.fn.getpid(), rootUri = vim.NIL, capabilities = vim.empty_dict(), initializationOptions = init_options,
  }, function(err)
    if err then
      failure, done = "initialize failed: " .. err.message, true
      return
    end
    rpc.notify("initialized", vim.empty_dict())
    rpc.request("workspace/executeCommand", { command = "editapply.status", arguments = { vim.empty_dict() } },
      function(status_err, result)
        if status_err then
          failure = "editapply.status failed: " .. status_err.message
        end
        status, done = result, true
      end)
  end)
  vim.wait(STATUS_TIMEOUT_MS, function()
    return done
  end, 50)
  if not done then
    failure = ("no answer within %d s"):format(STATUS_TIMEOUT_MS / 1000)
  end
  if not rpc.is_closing() then
    rpc.request("shutdown", vim.NIL, function()
      rpc.notify("exit", vim.NIL)
    end)
    vim.wait(5000, function()
      return rpc.is_closing()
    end, 50)
    rpc.terminate()
  end
  return status, messages, failure
end

local function report_engine(engine)
  if engine.reachable == false then
    vim.health.error(("the engine is unreachable: %s"):format(engine.error or "no answer"), {
      "Start it there (`editapply serve`), or unset settings.engineUrl to run the engine inside the server",
    })
    return
  elseif engine.engine == "remote" then
    vim.health.ok(("the engine at %s answers (%s)"):format(engine.url, engine.status or "ok"))
    return
  end
  if engine.vllm then
    if engine.vllm.reachable then
      vim.health.ok(("vLLM at %s answers (the local engine generates there)"):format(engine.vllm.url))
    else
      vim.health.error(engine.vllm.error or ("vLLM at %s does not answer"):format(engine.vllm.url), {
        "Start it (`editapply vllm-command --model ...` prints the command), or fix settings.vllmUrl",
        "Deterministic merges work without it; model runs and :EditApplyAsk need it",
      })
    end
  end
  if engine.installed == false then
    vim.health.error(("the model %s is not installed"):format(engine.model), {
      ("Run `editapply pull %s`, or set settings.model to an installed one (`editapply models`)"):format(engine.model),
      "Deterministic merges work without it; model runs and :EditApplyAsk need it",
    })
  elseif engine.loaded then
    vim.health.ok(("model %s loaded (running %s, waiting %s)"):format(engine.model, engine.running or 0, engine.waiting or 0))
  else
    vim.health.ok(("model %s%s; the local engine loads it on the first request that needs it"):format(
      engine.model, engine.installed and " installed" or ""))
  end
end

function M.check()
  vim.health.start("editapply")
  if vim.fn.has("nvim-0.11") == 1 then
    vim.health.ok("Neovim " .. tostring(vim.version()))
  else
    vim.health.error("Neovim 0.11+ is needed (vim.lsp.config), this is " .. tostring(vim.version()))
    return
  end

  local editapply = require("editapply")
  local register = editapply.config.register
  if register == "+" or register == "*" then
    if vim.fn.has("clipboard") == 1 then
      local ok, name = pcall(vim.fn["provider#clipboard#Executable"])
      vim.health.ok(("clipboard provider for :EditApply's register %s: %s"):format(register,
        ok and name ~= "" and name or "found"))
    else
      vim.health.warn(("no clipboard provider: :EditApply reads register %s, the clipboard"):format(register), {
        "Install xclip, xsel or wl-clipboard (:help clipboard)",
        "or set another register: require('editapply').setup({ register = 'a' }); a selection works without one",
      })
    end
  end
  local config = editapply.lsp_config()
  if not config or not config.cmd then
    vim.health.error("no `editapply` LSP config: lsp/editapply.lua is not on 'runtimepath'",
      { "Add editor_clients/nvim to 'runtimepath' (your plugin manager's `dir`, or vim.opt.rtp:append)" })
    return
  end
  local cmd = config.cmd
  if type(cmd) == "function" then
    vim.health.info("the server command is a function: not checked")
    return
  end
  if vim.fn.executable(cmd[1]) ~= 1 then
    vim.health.error(("server command not found: `%s` is not an executable (not on PATH)"):format(cmd[1]),
      install_advice(cmd))
    return
  end
  vim.health.ok(("server command: %s (%s)"):format(table.concat(cmd, " "), vim.fn.exepath(cmd[1])))

  local status, messages, failure = ask_status(cmd, config.init_options or vim.empty_dict())
  for _, message in ipairs(messages) do
    vim.health.warn(message, { "Fix it in require('editapply').setup({ settings = { ... } })" })
  end
  if not status then
    vim.health.error(("`%s` did not answer editapply.status: %s"):format(table.concat(cmd, " "), failure or "?"),
      install_advice(cmd))
    return
  end
  local settings = {}
  for key, value in pairs(status.settings or {}) do
    if value ~= vim.NIL then
      table.insert(settings, ("%s=%s"):format(key, tostring(value)))
    end
  end
  table.sort(settings)
  vim.health.ok(("editapply %s answers (settings: %s)"):format(status.version, table.concat(settings, ", ")))
  report_engine(status.engine)

  local clients = vim.lsp.get_clients({ name = "editapply" })
  vim.health.info(#clients > 0 and ("running clients: %d"):format(#clients)
    or "no editapply client runs yet: :EditApply starts one (or vim.lsp.enable('editapply'))")
end

return M

-- `editapply lsp` as a Neovim 0.11+ LSP config: `vim.lsp.enable("editapply")` starts it for the
-- filetypes below; `:EditApply` and friends start it for any buffer they are used in.
-- require("editapply").setup() overrides `cmd` and the server's settings (init_options).
---@type vim.lsp.Config
return {
  cmd = { "editapply", "lsp" },
  -- Code the apply pipeline parses, and markdown for chat panes (the server's code action applies
  -- the fenced block under the cursor).
  filetypes = {
    "python", "javascript", "javascriptreact", "typescript", "typescriptreact", "go", "rust", "java",
    "c", "cpp", "ruby", "cs", "sh", "bash", "lua", "markdown",
  },
  root_markers = { ".git", "pyproject.toml", "package.json", "go.mod", "Cargo.toml" },
  -- The server's settings (lsp_server/settings.py): engineUrl, apiKey, model, backend, vllmUrl,
  -- mode, promptForm, maxTokens. Unset keys take the server's defaults. `pickReadings`: an
  -- ambiguous snippet's readings, and a refused model file's merge, come back to the plugin,
  -- which offers them (vim.ui.select).
  init_options = { pickReadings = true },
  handlers = {
    -- The server's code action runs editapply.apply with no callback of the plugin's: its result
    -- (a reading to pick) is handled as the plugin's own commands' results are.
    ["workspace/executeCommand"] = function(...)
      return require("editapply.apply").command_result(...)
    end,
  },
}

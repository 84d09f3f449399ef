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

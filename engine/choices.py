"""The closed sets of names the front ends take (CLI flags, HTTP fields, LSP settings), each
defined here once. Imports nothing, so `editapply --help` stays fast."""

MODES = ("auto", "model", "deterministic")  # how an apply runs: engine/apply/pipeline.py
FORMS = ("rewrite", "draft")  # the prompt forms a request with a snippet may choose: prompts/apply.py
BACKENDS = ("engine", "vllm")  # who generates for the local engine: engine/config.py

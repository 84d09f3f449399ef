"""The deterministic half of the apply pipeline: snippet -> merge -> validation -> diff.

    from engine.apply import merge, validate, unified_diff

    result = merge(original, snippet, language="python")   # MergeResult(text, confidence, status, ...)
    check = validate(original, result)                      # Validation(ok, problems)
    print(unified_diff(original, result.text, "app.py"))

Modules, in data-flow order: `languages` (file name -> language, comment syntax, parsers),
`markers` + `evidence` (which lines are elisions), `snippet` (fences, segments), `anchor` and
`candidates` (where a segment could sit), `fuzzy` (the last resort), `placement` (where every
segment does sit, in order; `indent` fixes a dedented excerpt), `merge` (splice + status),
`validate`, `diff`. `text` keeps line endings exact throughout; `errors` holds the exceptions
and `Problem`. README.md beside this file explains the merge and what it scores.

The whole pipeline -- modes, the model path, the result every front end returns -- is
`pipeline.apply_edit(engine, ApplyRequest(...)) -> ApplyResult` (pipeline.py; the model half in
`model_path`, instruction targets in `targets`, the cheap input limits it checks first in
`limits`, file IO in `files`, the CLI command in `command`, the HTTP client in `client`). It is not imported here, so `engine.apply` stays light.
"""

from engine.apply.diff import apply_unified_diff, unified_diff
from engine.apply.errors import (
    ApplyError,
    DiffError,
    EmptySnippetError,
    MarkerOnlySnippetError,
    Problem,
    SnippetError,
)
from engine.apply.languages import detect_language
from engine.apply.merge import MergeResult, merge
from engine.apply.snippet import Snippet, parse_snippet
from engine.apply.validate import Validation, validate

__all__ = [
    "ApplyError",
    "DiffError",
    "EmptySnippetError",
    "MarkerOnlySnippetError",
    "MergeResult",
    "Problem",
    "Snippet",
    "SnippetError",
    "Validation",
    "apply_unified_diff",
    "detect_language",
    "merge",
    "parse_snippet",
    "unified_diff",
    "validate",
]

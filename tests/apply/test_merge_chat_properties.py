"""Property tests: the chat-style snippets of bench/fuzz_merge.py (function-shaped Python,
JavaScript and Go files, lazy snippets as chat models write them; its docstring says how they
are made), drawn by hypothesis, and the deterministic pipeline's promise -- a result it reports
valid is exactly the edit. It may refuse, never answer another file.

The merge rules these found: `edges.join_blank_lines`, `edges.rewritten_header`,
`candidates._misplaced` (and the narrowing of `candidates._echoes`).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz_merge import chat_case, outcome


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), st.sampled_from(["python", "javascript", "go"]))
def test_a_result_reported_valid_is_the_edit(rng, language):
    case = chat_case(rng, language)
    assert outcome(case, language) != "WRONG", case


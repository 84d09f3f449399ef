"""Property tests: the chat-style snippets of bench/fuzz_merge.py (function-shaped Python,
JavaScript and Go files, lazy snippets as chat models write them; its docstring says how they
are made), drawn by hypothesis, and the deterministic pipeline's promise -- a result it reports
valid is exactly the edit. It may refuse, never answer another file.

The merge rules these found: `edges.join_blank_lines`, `edges.rewritten_header`,
`candidates._misplaced`, `candidates._blank_edges_given_up` (and the narrowing of
`candidates._echoes`).
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


def test_a_blank_line_written_on_both_sides_of_a_marker_that_elides_nothing():
    """The fuzzer's find (python, seed 2, case 3,848): `return sigma`, a blank, a marker, a blank,
    `def omega_3` -- the marker stands for nothing, and both blanks are the original's one blank
    line between the two functions. Both segments anchored on it; the second kept it, and the
    first fell back to a span of its first four lines, keeping the old body's last three lines
    under the new one (valid, at confidence 1.0). Now a segment may leave a blank edge line
    unanchored (`candidates._blank_edges_given_up`)."""
    original = (
        'import os\nimport sys\n\ndef beta_0(x):\n\n    return beta\n\ndef alpha_1(x):\n\n\n'
        '    v_1_2 = compute(alpha, 2)\n    v_1_3 = compute(gamma, 3)\n'
        '    v_1_4 = compute(gamma, 4)\n    return gamma\n\ndef omega_2(x):\n\n\n'
        '    v_1_2 = compute(alpha, 2)\n    v_1_3 = compute(gamma, 3)\n'
        '    v_1_4 = compute(gamma, 4)\n    return sigma\n\ndef omega_3(x):\n'
        '    v_3_0 = compute(alpha, 0)\n    return None\n    v_3_2 = compute(omega, 2)\n\n'
        '    return None\n    return gamma\n\n\ndef omega_4(x):\n\n'
        '    v_4_1 = compute(alpha, 1)\n    v_4_2 = compute(delta, 2)\n    return delta\n'
    )
    snippet = (
        'Here is the updated code:\n\n```python\n# ... existing code ...\n\ndef beta_0(x):\n\n'
        '    return beta\n# ... existing code ...\ndef omega_2(x, y):\n\n\n'
        '    v_1_2 = compute(alpha, 2)\n    changed_0 = gamma()\n'
        '    v_1_4 = compute(gamma, 4)\n    return sigma\n\n# ... existing code ...\n\n'
        'def omega_3(x):\n    changed_1 = omega()\n    return None\n'
        '    v_3_2 = compute(omega, 2)\n    inserted_2()\n\n    return None\n    return gamma\n'
        '\n\ndef omega_4(x):\n\n    v_4_1 = compute(alpha, 1)\n    v_4_2 = compute(delta, 2)\n'
        '# ... existing code ...\n```\n\nThis changes the function as asked.\n'
    )
    expected = (
        'import os\nimport sys\n\ndef beta_0(x):\n\n    return beta\n\ndef alpha_1(x):\n\n\n'
        '    v_1_2 = compute(alpha, 2)\n    v_1_3 = compute(gamma, 3)\n'
        '    v_1_4 = compute(gamma, 4)\n    return gamma\n\ndef omega_2(x, y):\n\n\n'
        '    v_1_2 = compute(alpha, 2)\n    changed_0 = gamma()\n'
        '    v_1_4 = compute(gamma, 4)\n    return sigma\n\ndef omega_3(x):\n'
        '    changed_1 = omega()\n    return None\n    v_3_2 = compute(omega, 2)\n'
        '    inserted_2()\n\n    return None\n    return gamma\n\n\ndef omega_4(x):\n\n'
        '    v_4_1 = compute(alpha, 1)\n    v_4_2 = compute(delta, 2)\n    return delta\n'
    )
    assert outcome((original, snippet, expected), "python") == "exact"

"""Finding a fenced snippet and the file it names (lsp_server/snippets.py), without a server."""

from __future__ import annotations

from lsp_server.snippets import fenced_block_at, named_file

CHAT = """Here is the fix:

```python src/app.py
def f():
    return 1
```

And a test:

~~~~
# tests/test_app.py
assert f() == 1
~~~~
"""


def test_the_block_under_the_cursor_with_its_fences():
    assert fenced_block_at(CHAT, 3) == "```python src/app.py\ndef f():\n    return 1\n```\n"
    assert fenced_block_at(CHAT, 2) == fenced_block_at(CHAT, 5) == fenced_block_at(CHAT, 3)
    assert fenced_block_at(CHAT, 10).startswith("~~~~\n# tests/test_app.py")


def test_outside_any_block_is_none():
    assert fenced_block_at(CHAT, 0) is None
    assert fenced_block_at(CHAT, 7) is None


def test_an_unclosed_fence_is_no_block():
    assert fenced_block_at("```py\nx = 1\n", 1) is None


def test_a_shorter_or_other_fence_does_not_close():
    text = "````md\n```py\nx\n```\n````\n"
    assert fenced_block_at(text, 2) == text


def test_named_file_from_the_info_string_or_the_first_line():
    assert named_file("```python src/app.py\nx\n```\n") == "src/app.py"
    assert named_file('```py title="app.py"\nx\n```\n') == "app.py"
    assert named_file("```app.py\nx\n```\n") == "app.py"
    assert named_file("```ts\n// File: src/app.ts\nx\n```\n") == "src/app.ts"
    assert named_file("~~~~\n# tests/test_app.py\nassert 1\n~~~~\n") == "tests/test_app.py"


def test_no_name():
    assert named_file("```python\nx = 1\n```\n") is None
    assert named_file("```python\n# just a comment here\n```\n") is None
    assert named_file("x = 1\n") is None


def test_docstring_example():
    import doctest

    from lsp_server import snippets

    assert doctest.testmod(snippets).failed == 0

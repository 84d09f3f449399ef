"""Language detection, comment syntax and tree-sitter parsers."""

from __future__ import annotations

import threading

import pytest

from engine.apply.languages import (
    detect_language,
    fence_tag_matches,
    language_spec,
    parse_tree,
    parser_for,
    resolve_language,
)


@pytest.mark.parametrize(
    "path, language",
    [
        ("src/app.py", "python"),
        ("stubs/mod.pyi", "python"),
        ("lib/index.js", "javascript"),
        ("web/App.jsx", "javascript"),
        ("client/src/api.ts", "typescript"),
        ("ui/Button.tsx", "tsx"),
        ("cmd/main.go", "go"),
        ("src/lib.rs", "rust"),
        ("Main.java", "java"),
        ("core.h", "c"),
        ("engine.cpp", "cpp"),
        ("Program.cs", "csharp"),
        ("Rakefile", "ruby"),
        ("build/Makefile", "make"),
        ("deploy.sh", "bash"),
        ("README", "text"),
        ("notes.unknownext", "text"),
        (None, "text"),
    ],
)
def test_language_from_file_name(path, language):
    assert detect_language(path) == language


def test_override_beats_file_name_and_accepts_aliases():
    assert detect_language("script.txt", override="py") == "python"
    assert detect_language("a.js", override="golang") == "go"
    with pytest.raises(ValueError, match="unknown language"):
        detect_language("a.py", override="klingon")


def test_comment_syntax():
    assert language_spec("python").line_comments == ("#",)
    assert language_spec("rust").line_comments == ("//",)
    assert ("/*", "*/") in language_spec("go").block_comments
    assert language_spec("html").block_comments == (("<!--", "-->"),)
    assert language_spec("no-such-language").name == "text"


def test_fence_tags():
    assert fence_tag_matches("py", "python")
    assert fence_tag_matches("typescript", "tsx")
    assert not fence_tag_matches("bash", "python")
    assert resolve_language("Python3") == "python"


@pytest.mark.parametrize("language", ["python", "javascript", "typescript", "tsx", "go", "rust", "java", "c", "cpp", "ruby", "csharp", "bash"])
def test_every_grammar_wheel_parses(language):
    tree = parse_tree("x\n", language)
    assert tree is not None and tree.root_node.type


def test_unknown_language_has_no_parser():
    assert parser_for("text") is None
    assert parse_tree("anything", "swift") is None


def test_parsers_are_cached_per_thread():
    assert parser_for("python") is parser_for("py")
    other = []
    thread = threading.Thread(target=lambda: other.append(parser_for("python")))
    thread.start()
    thread.join()
    assert other[0] is not parser_for("python")

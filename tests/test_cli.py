"""`editapply apply` as a real subprocess: exit codes, one-line reasons, the file left untouched on
every failure (bytes and mtime), atomic `--write` keeping the mode, `--json`, `--no-model`, the
model path with the CI model. `--engine URL` against the real server: tests/server/test_cli_engine.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.apply.errors import ApplyError
from engine.apply.files import FileChangedError, read_source, write_source
from tests.apply.conftest import SHAPES_PY

ROOT = Path(__file__).resolve().parents[1]
OLD = 1_000_000_000  # a fixed mtime in the past, so "unchanged" is checkable to the nanosecond
INSERT = '# ... existing code ...\n    def area(self):\n        """Area in square units."""\n        return self.w * self.h\n# ... existing code ...\n'
BROKEN = "# ... existing code ...\n    def area(self:\n        return self.w * self.h\n# ... existing code ...\n"
UNMATCHED = "# ... existing code ...\nzzz = qqq(1)\n# ... existing code ...\n"


def editapply(*args: str, stdin: bytes | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.cli", "apply", *args], cwd=ROOT, input=stdin,
                          capture_output=True, env={**os.environ, **(env or {})}, timeout=300)


@pytest.fixture
def target(tmp_path) -> Path:
    path = tmp_path / "shapes.py"
    path.write_text(SHAPES_PY)
    os.utime(path, ns=(OLD, OLD))
    return path


def snippet_file(tmp_path, data: str | bytes, name: str = "snippet.txt") -> str:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return str(path)


def assert_untouched(path: Path, data: bytes | None = None) -> None:
    assert path.read_bytes() == (data if data is not None else SHAPES_PY.encode())
    assert path.stat().st_mtime_ns == OLD


def one_line(stderr: bytes) -> str:
    lines = stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("editapply: ")
    return lines[0]


# ---- bad input: exit 2, a one-line reason, nothing touched ------------------------------------

BAD_SNIPPETS = {
    "empty snippet": ("", "empty"),
    "whitespace snippet": ("  \n\n", "empty"),
    "marker-only snippet": ("# ... existing code ...\n", "only elision markers"),
    "binary snippet": (b"x = 1\0\n", "binary"),
    "invalid UTF-8 snippet": (b"x = '\xff'\n", "not valid UTF-8"),
}


@pytest.mark.parametrize("name", BAD_SNIPPETS)
def test_a_bad_snippet_is_exit_2(tmp_path, target, name):
    data, reason = BAD_SNIPPETS[name]
    run = editapply(str(target), snippet_file(tmp_path, data), "--write", "--no-model")
    assert run.returncode == 2 and reason in one_line(run.stderr)
    assert_untouched(target)


@pytest.mark.parametrize("data, reason", [(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", "binary"),
                                          (b"caf\xe9 = 1\n", "not valid UTF-8")])
def test_a_binary_or_invalid_utf8_file_is_exit_2(tmp_path, data, reason):
    path = tmp_path / "file.py"
    path.write_bytes(data)
    os.utime(path, ns=(OLD, OLD))
    run = editapply(str(path), snippet_file(tmp_path, INSERT), "--write")
    assert run.returncode == 2 and reason in one_line(run.stderr)
    assert_untouched(path, data)


def test_a_missing_file_is_exit_2(tmp_path):
    run = editapply(str(tmp_path / "nope.py"), snippet_file(tmp_path, INSERT))
    assert run.returncode == 2 and "no such file" in one_line(run.stderr)
    assert not (tmp_path / "nope.py").exists()


def test_a_snippet_matching_nowhere_in_deterministic_mode_is_exit_2(tmp_path, target):
    run = editapply(str(target), snippet_file(tmp_path, UNMATCHED), "--no-model", "--write")
    assert run.returncode == 2 and "matches nowhere" in one_line(run.stderr)
    assert_untouched(target)


@pytest.mark.parametrize("args, reason", [
    ((), "nothing to apply"),
    (("SNIPPET", "--no-model", "--mode", "model"), "contradicts"),
    (("--instruction", "Make main return 1", "--no-model"), "needs the model"),
])
def test_usage_errors_are_exit_2(tmp_path, target, args, reason):
    args = tuple(snippet_file(tmp_path, INSERT) if a == "SNIPPET" else a for a in args)
    run = editapply(str(target), *args)
    assert run.returncode == 2 and reason in one_line(run.stderr)
    assert_untouched(target)


def test_a_file_over_the_context_is_exit_2_before_the_model_loads(tmp_path, target, ci_model_dir):
    run = editapply(str(target), snippet_file(tmp_path, INSERT), "--mode", "model", "--model", str(ci_model_dir),
                    "--write", env={"EDITAPPLY_MAX_MODEL_LEN": "256"})
    assert run.returncode == 2 and "too large for the model's context" in one_line(run.stderr)
    assert_untouched(target)


# ---- the deterministic path, previews and writes ------------------------------------------------

def test_no_model_previews_the_diff_and_leaves_the_file(tmp_path, target):
    run = editapply(str(target), snippet_file(tmp_path, INSERT), "--no-model")
    assert run.returncode == 0
    out = run.stdout.decode()
    assert out.startswith("--- a/" + str(target).lstrip("/")) and '+        """Area in square units."""' in out
    assert "deterministic path" in run.stderr.decode()
    assert_untouched(target)


def test_snippet_from_stdin(target):
    run = editapply(str(target), "-", "--no-model", stdin=INSERT.encode())
    assert run.returncode == 0 and "Area in square units" in run.stdout.decode()


def test_write_is_atomic_and_keeps_the_mode(tmp_path, target):
    target.chmod(0o640)
    run = editapply(str(target), snippet_file(tmp_path, INSERT), "--write")
    assert run.returncode == 0, run.stderr
    assert target.read_text() == SHAPES_PY.replace("    def area(self):\n", '    def area(self):\n        """Area in square units."""\n')
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shapes.py", "snippet.txt"]  # no temp file left


def test_write_through_a_symlink_replaces_the_target(tmp_path, target):
    link = tmp_path / "link.py"
    link.symlink_to(target)
    run = editapply(str(link), snippet_file(tmp_path, INSERT), "--write")
    assert run.returncode == 0 and link.is_symlink() and "Area in square units" in target.read_text()


def test_validation_failure_is_exit_1_and_refuses_to_write_unless_forced(tmp_path, target):
    snippet = snippet_file(tmp_path, BROKEN)
    run = editapply(str(target), snippet, "--no-model", "--write")
    assert run.returncode == 1
    err = run.stderr.decode()
    assert "parse_errors" in err and "refusing to write" in err
    assert_untouched(target)
    assert editapply(str(target), snippet, "--no-model").returncode == 1  # a preview fails too
    forced = editapply(str(target), snippet, "--no-model", "--write", "--force")
    assert forced.returncode == 0 and "def area(self:" in target.read_text()


def test_json_prints_the_v1_apply_response(tmp_path, target):
    run = editapply(str(target), snippet_file(tmp_path, INSERT), "--json", "--no-model")
    assert run.returncode == 0
    body = json.loads(run.stdout)
    assert set(body) == {"merged_code", "diff", "validation", "usage", "stats", "readings", "hunks", "candidate"}
    assert body["validation"] == {"ok": True, "problems": []}
    assert set(body["usage"]) == {"prompt_tokens", "completion_tokens", "accepted_prediction_tokens", "rejected_prediction_tokens"}
    assert body["stats"]["path"] == "deterministic" and body["stats"]["merge_status"] == "exact"
    assert "Area in square units" in body["merged_code"]
    assert_untouched(target)


def test_a_file_changed_during_the_apply_is_not_overwritten(tmp_path, target):
    source = read_source(str(target))
    target.write_text(SHAPES_PY + "# saved by the editor meanwhile\n")
    with pytest.raises(FileChangedError):
        write_source(source, "new text\n")
    assert target.read_text().endswith("# saved by the editor meanwhile\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shapes.py"]


def test_read_source_refuses_a_directory(tmp_path):
    with pytest.raises(ApplyError, match="directory"):
        read_source(str(tmp_path))


# ---- the model path (CI model: too weak to merge, so only behaviour is checked) -------------------

def test_model_mode_with_the_ci_model(tmp_path, target, ci_model_dir):
    run = editapply(str(target), snippet_file(tmp_path, INSERT), "--mode", "model", "--model", str(ci_model_dir),
                    "--max-tokens", "16", "--json", "--write")
    body = json.loads(run.stdout)
    s, u = body["stats"], body["usage"]
    assert s["path"] == "model" and s["finish_reason"] == "length" and u["completion_tokens"] == 16
    assert u["accepted_prediction_tokens"] + u["rejected_prediction_tokens"] == s["drafted"]
    # 16 tokens cannot hold the file: validation fails, nothing is written.
    assert run.returncode == 1 and not body["validation"]["ok"] and "truncated" in body["validation"]["problems"][0]["name"]
    assert "refusing to write" in run.stderr.decode()
    assert_untouched(target)
    # The merge validated: offered for review (issue 32 item 4), never written.
    merge = json.loads(editapply(str(target), snippet_file(tmp_path, INSERT), "--no-model", "--json").stdout)
    assert body["candidate"]["merged_code"] == merge["merged_code"]
    run = editapply(str(target), snippet_file(tmp_path, INSERT), "--mode", "model", "--model", str(ci_model_dir),
                    "--max-tokens", "16")
    assert run.returncode == 1 and "the model did not confirm it: --mode deterministic gives it" in run.stderr.decode()


def test_an_edit_to_an_empty_file_of_no_known_language_is_never_a_silent_success(tmp_path, ci_model_dir):
    """Issue 10, item 5, the real CLI with the CI model: `e.txt` is empty and of no known
    language; the model's answer is written only if it holds the snippet's lines, else the
    apply is refused (exit 1) and the file stays empty. Never exit 0 with nothing done."""
    path = tmp_path / "e.txt"
    path.write_text("")
    run = editapply(str(path), snippet_file(tmp_path, "first line\nsecond line\n"), "--mode", "model",
                    "--model", str(ci_model_dir), "--max-tokens", "32", "--write")
    if run.returncode == 0:
        assert "first line" in path.read_text() and "second line" in path.read_text()
    else:
        assert run.returncode == 1 and path.read_text() == "" and b"validation failed" in run.stderr


AMBIGUOUS = "class MyError(Exception):\n    \"\"\"Raised when it fails.\"\"\"\n    pass\n\n\nclass Other:\n    x = 1\n"
ENDS_AT_DOCSTRING = "# ... existing code ...\nclass MyError(Exception):\n    \"\"\"Raised when it fails.\"\"\"\n"


def test_an_ambiguous_snippet_lists_its_readings_and_reading_takes_one(tmp_path):
    """No marker after the docstring: `pass` stays, or the class ends there. Deterministic mode
    refuses (exit 1, file untouched) and lists both; `--reading 2` writes the second; a reading
    the snippet does not have is bad input (exit 2)."""
    path = tmp_path / "errors.py"
    path.write_text(AMBIGUOUS)
    snip = snippet_file(tmp_path, ENDS_AT_DOCSTRING)
    run = editapply(str(path), snip, "--no-model", "--write")
    assert run.returncode == 1 and path.read_text() == AMBIGUOUS
    assert b"reading 1: the snippet's last line with no marker after it" in run.stderr
    assert b"reading 2: the snippet's last line ends its block: original lines 3-3 are deleted" in run.stderr
    body = json.loads(editapply(str(path), snip, "--no-model", "--json").stdout)
    assert [r["merged_code"] for r in body["readings"]] == [AMBIGUOUS, AMBIGUOUS.replace("    pass\n", "")]
    run = editapply(str(path), snip, "--no-model", "--write", "--reading", "2")
    assert run.returncode == 0 and path.read_text() == AMBIGUOUS.replace("    pass\n", "")
    path.write_text(AMBIGUOUS)
    run = editapply(str(path), snip, "--no-model", "--reading", "3")
    assert run.returncode == 2 and b"reading 3 was asked for, but the snippet has 2 reading(s)" in run.stderr

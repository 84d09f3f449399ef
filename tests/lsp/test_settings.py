"""Parsing the client's settings (lsp_server/settings.py), without a server."""

from __future__ import annotations

from dataclasses import fields

from lsp_server.settings import DEFAULTS, KEYS, Settings, merged, parse


def test_every_key_maps_to_a_field():
    assert set(KEYS.values()) == {f.name for f in fields(Settings)}


def test_nothing_gives_the_defaults():
    assert parse(None) == (DEFAULTS, [])
    assert parse({}) == (DEFAULTS, [])


def test_local_engine_and_model():
    settings, problems = parse({"engine": "local", "model": "smollm2-135m", "mode": "deterministic",
                                "promptForm": "rewrite", "maxTokens": 300})
    assert problems == []
    assert settings == Settings("local", "smollm2-135m", mode="deterministic", prompt_form="rewrite", max_tokens=300)


def test_an_engine_url_means_remote_and_a_section_is_read():
    settings, problems = parse({"editapply": {"engineUrl": "http://127.0.0.1:8000/", "apiKey": "k"}})
    assert problems == []
    assert (settings.engine, settings.engine_url, settings.api_key) == ("remote", "http://127.0.0.1:8000", "k")


def test_bad_values_name_the_key_and_take_the_default():
    settings, problems = parse({"mode": "fast", "maxTokens": 0, "promptForm": 3, "engineUrl": "localhost:8000",
                                "model": "", "engine": "gpu"})
    assert settings == DEFAULTS
    assert problems == [
        "setting engine: must be one of local, remote, got 'gpu'; using 'local'",
        "setting model: must be a non-empty string, got ''; using the default",
        "setting engineUrl: must be an http(s) URL such as http://127.0.0.1:8000, got 'localhost:8000'; "
        "using the default",
        "setting mode: must be one of auto, model, deterministic, got 'fast'; using 'auto'",
        "setting promptForm: must be one of rewrite, draft, got 3; using the default",
        "setting maxTokens: must be a positive integer, got 0; using the default",
    ]


def test_a_boolean_is_not_a_token_count():
    assert parse({"maxTokens": True})[0].max_tokens is None


def test_remote_without_a_url_falls_back_to_local():
    settings, [problem] = parse({"engine": "remote"})
    assert settings.engine == "local" and "needs engineUrl" in problem


def test_unknown_keys_and_non_objects_are_reported():
    assert parse({"colour": 1})[1] == [f"unknown setting 'colour' ignored (known: {', '.join(KEYS)})"]
    assert parse([1])[1] == ["settings must be an object, got [1]; using the defaults"]


def test_updates_merge_and_null_restores_the_default():
    raw = merged(None, {"engineUrl": "http://h:1", "mode": "model"})
    raw = merged(raw, {"editapply": {"mode": None}})
    assert raw == {"engineUrl": "http://h:1"}
    assert merged(raw, {}) is raw and merged(raw, None) is raw  # Neovim's empty didChangeConfiguration


def test_engine_key_changes_only_with_the_engine():
    a, b = parse({"model": "m", "mode": "model"})[0], parse({"model": "m"})[0]
    assert a.engine_key() == b.engine_key() != parse({"model": "n"})[0].engine_key()


def test_the_vllm_backend_and_its_url():
    """backend/vllmUrl choose who generates for the local engine; a change of either is a new engine."""
    settings, problems = parse({"backend": "vllm", "vllmUrl": "http://gpu-host:8001/"})
    assert problems == [] and (settings.backend, settings.vllm_url) == ("vllm", "http://gpu-host:8001")
    assert settings.engine_key() != DEFAULTS.engine_key() and "on vLLM at http://gpu-host:8001" in settings.describe()
    settings, problems = parse({"backend": "tgi", "vllmUrl": "gpu-host"})
    assert settings == DEFAULTS and [p.split(":")[0] for p in problems] == ["setting backend",
                                                                             "setting vllmUrl"]

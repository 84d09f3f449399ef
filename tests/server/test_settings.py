"""ServerSettings from the environment (engine/server/settings.py): each field one EDITAPPLY_*
variable, its bounds checked, a bad value named in one line. No server runs here."""

import pytest

from engine.server.settings import ServerSettings


def test_variables_land_in_their_fields():
    env = {"EDITAPPLY_API_KEY": "k3y", "EDITAPPLY_MAX_QUEUE": "5", "EDITAPPLY_MERGE_WORKERS": "0",
           "EDITAPPLY_MODEL_ID": "editapply-small", "EDITAPPLY_MAX_MODEL_LEN": "1024",  # the engine's
           "EDITAPPLY_ENGINE_PROCESS": "0"}
    settings = ServerSettings.from_env(env)
    assert (settings.api_key, settings.max_queue, settings.merge_workers) == ("k3y", 5, 0)
    assert settings.engine_process is False and ServerSettings().engine_process is True
    assert settings.model_id == "editapply-small"


def test_empty_means_unset_and_overrides_win():
    assert ServerSettings.from_env({"EDITAPPLY_API_KEY": "", "EDITAPPLY_MAX_QUEUE": ""}) == ServerSettings()
    assert ServerSettings.from_env({"EDITAPPLY_API_KEY": "env"}, api_key=None).api_key == "env"
    assert ServerSettings.from_env({"EDITAPPLY_API_KEY": "env"}, api_key="flag").api_key == "flag"


def test_an_explicit_environ_wins_over_os_environ(monkeypatch):
    monkeypatch.setenv("EDITAPPLY_MAX_QUEUE", "3")
    assert ServerSettings.from_env().max_queue == 3
    assert ServerSettings.from_env({}).max_queue == 64
    assert ServerSettings().max_queue == 64  # construction never reads the environment


@pytest.mark.parametrize("env, message", [
    ({"EDITAPPLY_MAX_QUEUE": "abc"}, "EDITAPPLY_MAX_QUEUE='abc': input should be a valid integer"),
    ({"EDITAPPLY_MAX_QUEUE": "-1"}, "EDITAPPLY_MAX_QUEUE='-1': input should be greater than or equal to 0"),
    ({"EDITAPPLY_MAX_BODY_BYTES": "100"}, "EDITAPPLY_MAX_BODY_BYTES='100': input should be greater than or equal to 1024"),
    ({"EDITAPPLY_MERGE_WORKERS": "two"}, "EDITAPPLY_MERGE_WORKERS='two': input should be a valid integer"),
    ({"EDITAPPLY_DEFAULT_MAX_TOKENS": "-5"}, "EDITAPPLY_DEFAULT_MAX_TOKENS='-5'"),
])
def test_a_bad_variable_is_named_in_one_line(env, message):
    with pytest.raises(ValueError) as info:
        ServerSettings.from_env(env)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_a_bad_argument_is_named_as_the_field():
    with pytest.raises(ValueError, match=r"^retry_after_s=-1: input should be greater than or equal to 0$"):
        ServerSettings(retry_after_s=-1)


def test_serve_exits_2_naming_the_variable(monkeypatch, capsys):
    """`editapply serve` with a bad variable stops before loading anything (exit 2, one line)."""
    from engine.server.serve import serve

    monkeypatch.setenv("EDITAPPLY_MAX_QUEUE", "lots")
    assert serve(model="/nonexistent") == 2
    assert "EDITAPPLY_MAX_QUEUE='lots'" in capsys.readouterr().err

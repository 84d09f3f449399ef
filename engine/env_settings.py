"""EnvSettings: a pydantic-settings model whose every field is one EDITAPPLY_* variable.

Two such models, one per process kind: EngineConfig (engine/config.py) and ServerSettings
(engine/server/settings.py). Field `max_queue` is the variable `EDITAPPLY_MAX_QUEUE`, declared
once with its type, bounds and description; cross-field rules are model validators.

* `Model(**fields)` takes its arguments and the defaults, never the environment (code and tests
  build configs so, and a stray variable must not change them).
* `Model.from_env(environ=None, **overrides)`: the defaults, then the EDITAPPLY_* variables of
  `environ` (os.environ when None; an empty value is unset), then the overrides that are not None
  (CLI flags that were not given are None).

A bad value is a ValueError of one line that names where it came from (the variable, or the
field for an argument), the value and what was expected:
`EDITAPPLY_MAX_QUEUE='abc': input should be a valid integer, unable to parse string as an integer`.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import Self

from pydantic import ValidationError
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict

PREFIX = "EDITAPPLY_"


class EnvSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=PREFIX, env_ignore_empty=True, extra="forbid")

    def __init__(self, _variables: Collection[str] = (), **fields):
        """`_variables`: the fields whose values come from the environment (from_env), for the errors."""
        try:
            super().__init__(**fields)
        except ValidationError as exc:
            raise ValueError(describe(exc, _variables)) from None

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings):
        return (init_settings,)  # construction takes the arguments only; from_env reads the variables

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides) -> Self:
        """Defaults, then EDITAPPLY_* variables, then explicit overrides (e.g. CLI flags)."""
        found = Variables(cls, os.environ if environ is None else environ)()
        given = {name: value for name, value in overrides.items() if value is not None}
        return cls(_variables=found.keys() - given.keys(), **(found | given))


class Variables(EnvSettingsSource):
    """pydantic-settings' environment source over `environ` instead of os.environ: calling it
    gives {field: raw string} for the fields' variables that are set and not empty."""

    def __init__(self, settings_cls: type[EnvSettings], environ: Mapping[str, str]):
        self.environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {name if self.case_sensitive else name.lower(): value for name, value in self.environ.items()
                if not (self.env_ignore_empty and value == "")}


def describe(exc: ValidationError, variables: Collection[str]) -> str:
    """`exc`'s problems in one line, each `WHERE=VALUE: what was expected`: WHERE is the variable
    for the fields in `variables` (those read from the environment), else the field. A model
    validator's message (a rule across fields) stands as written: it names the variables itself."""
    problems = []
    for error in exc.errors(include_url=False):
        message = str(error["ctx"]["error"]) if error["type"] == "value_error" else error["msg"]
        if message[1:2].islower():  # pydantic's "Input should be ...", not a variable's name
            message = message[:1].lower() + message[1:]
        if error["loc"]:
            name = str(error["loc"][0])
            message = f"{variable(name) if name in variables else name}={error['input']!r}: {message}"
        problems.append(message)
    return "; ".join(problems)


def variable(name: str) -> str:
    """The environment variable of field `name`."""
    return PREFIX + name.upper()

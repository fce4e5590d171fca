"""Where the configuration is read from and how a wrong one is told: ``ConfigError``, the
default file's path, the TOML file read plainly, environment variables holding a list or a
table checked as JSON, and pydantic's errors turned into one message naming each key (and
the ``SPINDLE_...`` variable that set it, when one did). ``app.config`` builds
``Settings`` from these pieces (``load_settings``); nothing here knows the sections
themselves, so ``_env_json_problem`` is given the model to walk.
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import platformdirs
from pydantic import BaseModel
from pydantic_core import ErrorDetails

__all__ = ["ConfigError", "default_config_path", "misspelt_env"]


class ConfigError(Exception):
    """The configuration is wrong; the message names the key and the expected form."""


@dataclass(frozen=True)
class _Sources:
    """Where ``Settings()`` reads from: the TOML file (or none) and the environment."""

    toml: Path | None = None
    env: bool = True


def default_config_path() -> Path:
    env = os.environ.get("SPINDLE_CONFIG")
    if env:
        return Path(os.path.expanduser(env))
    return Path(platformdirs.user_config_dir("spindle")) / "config.toml"


def _env_var(loc: tuple[Any, ...]) -> str | None:
    """The environment variable that set the value at ``loc``, when one did."""
    names = {k.upper(): k for k in os.environ}
    for end in range(len(loc), 0, -1):
        name = "SPINDLE_" + "__".join(str(p) for p in loc[:end]).upper()
        if name in names:
            return names[name]
    return None


def _describe(errors: list[ErrorDetails], source: str, with_env: bool) -> str:
    lines = [f"Invalid configuration ({source}):"]
    for err in errors:
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (check its spelling and section)"
        var = _env_var(loc) if with_env else None
        # A check of several keys together names its key in its message.
        key = ".".join(str(p) for p in loc)
        lines.append(f"  {key}: {msg}" if key else f"  {msg}")
        lines[-1] += f" (from ${var})" if var else ""
    return "\n".join(lines)


def _complex_annotation(annotation: Any) -> Any:
    """The model or container type behind ``annotation`` (None for a plain value)."""
    for arg in (annotation, *typing.get_args(annotation)):
        origin = typing.get_origin(arg) or arg
        if origin is Annotated:
            found = _complex_annotation(typing.get_args(arg)[0])
            if found is not None:
                return found
        elif origin in (list, dict, tuple, set) or (
            isinstance(origin, type) and issubclass(origin, BaseModel)
        ):
            return arg
    return None


def _env_json_problem(settings: type[BaseModel], name: str, value: str) -> str | None:
    """Why the variable ``name`` (``SPINDLE_A__B``), which sets a list or a table of
    ``settings``, cannot be read; None when it is fine or is not one of those."""
    target: Any = settings
    for part in name[len("SPINDLE_") :].lower().split("__"):
        if isinstance(target, type) and issubclass(target, BaseModel):
            field = target.model_fields.get(part)
            if field is None:
                return None  # pydantic names an unknown key itself
            target = _complex_annotation(field.annotation)
        elif typing.get_origin(target) is dict:
            target = _complex_annotation(typing.get_args(target)[1])
        else:
            return None
        if target is None:
            return None  # a plain value: pydantic checks it, naming the key
    try:
        json.loads(value)
    except ValueError as exc:
        origin = typing.get_origin(target) or target
        example = '["~/code", "/srv/repos"]' if origin in (list, tuple, set) else '{"key": "value"}'
        return (
            f"{name}: not valid JSON ({exc}); a list or a table is written as JSON, "
            f"e.g. {name}='{example}'"
        )
    return None


def misspelt_env(settings: type[BaseModel], environ: typing.Mapping[str, str]) -> list[str]:
    """A warning for each ``SPINDLE_...`` variable whose setting (its part before any
    ``__``) is none of ``settings``' but is spelt almost like one: it is ignored, and a
    token set as ``SPINDLE_DISCORD_TOKN`` would leave the bot in console mode without a word.
    (A wrong key inside a section is refused outright; other ``SPINDLE_`` variables, of
    tests or of the commands Spindle runs, say nothing.)"""
    fields = list(settings.model_fields)
    warnings = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith("SPINDLE_"):
            continue
        head, _, rest = upper[len("SPINDLE_") :].partition("__")
        if head.lower() in fields:
            continue
        near = difflib.get_close_matches(head.lower(), fields, n=1, cutoff=0.8)
        if near:
            meant = "SPINDLE_" + near[0].upper() + (f"__{rest}" if rest else "")
            warnings.append(f"${name} is not a setting and is ignored: did you mean ${meant}?")
    return warnings


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(
            f"Config file {path} does not exist (create one with `spindle init`)."
        ) from None
    except OSError as exc:
        raise ConfigError(f"Cannot read config file {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"Config file {path} is not valid TOML: {exc}") from None

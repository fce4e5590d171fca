"""The value types every configuration section is built from, and the section base.

Each type refuses, with a message naming the expected form, what would fail later: a text
with a NUL, an empty name, a relative path (it would depend on the directory Spindle is
started from), a number that is true/false or not finite, a URL without its scheme or host,
an environment variable name with ``=``. ``_Section`` is the base of every ``[section]``
model: an unknown key is refused, not ignored. ``app.config`` imports these under the same
names, so a section added there uses them as before.
"""

from __future__ import annotations

import os
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictStr

__all__ = ["Count", "EnvName", "Name", "PathText", "Seconds", "Snowflake", "Text"]


def _text(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    return value


def _nonempty(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _path(value: str) -> str:
    if not os.path.isabs(os.path.expanduser(value)):
        raise ValueError(
            f"expected an absolute path or one starting with ~, not {value!r} (a relative "
            "path would depend on the directory Spindle is started from)"
        )
    return value


def _not_bool(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("expected a number, not true/false")
    return value


def _finite(value: object) -> object:
    value = _not_bool(value)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return value  # pydantic says what it expected
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError("expected a finite number of seconds")
    return value


def _url(schemes: tuple[str, ...]) -> Any:
    def check(value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in schemes or not parts.hostname:
            raise ValueError(f"expected a {' or '.join(schemes)} URL with a host, not {value!r}")
        return value

    return AfterValidator(check)


def _env_name(value: str) -> str:
    if not value or "=" in value or "\x00" in value:
        raise ValueError(f"{value!r} is not an environment variable name")
    return value


Text = Annotated[StrictStr, AfterValidator(_text)]
Name = Annotated[StrictStr, AfterValidator(_text), AfterValidator(_nonempty)]
PathText = Annotated[Name, AfterValidator(_path)]
EnvName = Annotated[StrictStr, AfterValidator(_env_name)]
Snowflake = Annotated[int, BeforeValidator(_not_bool), Field(gt=0, lt=2**64)]
Seconds = Annotated[float, BeforeValidator(_finite)]
Count = Annotated[int, BeforeValidator(_not_bool)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")

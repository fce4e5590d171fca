"""Reading a CLI's JSON defensively: the field checkers every parser uses.

Two kinds, for the two things a parser may want from a field of the wrong type:

- ``need_str`` / ``need_dict`` / ``need_list`` raise ``MalformedInput``: the field is what the
  message is about, so without it the whole line is malformed (the parser counts it so).
- ``as_str`` / ``as_dict`` / ``as_list`` / ``as_int`` / ``as_float`` never raise: a field of
  the wrong type reads as absent, and an unexpected shape degrades to a shorter event.

``decode_json`` is the one JSON decoder every parser uses (orjson, with the standard library's
decoder as the judge of what orjson refuses); ``load_object`` decodes one line into a JSON
object (or ``MalformedInput``); ``cut`` shortens text for a chat card. Nothing here does I/O.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

from threadspindle.runtime.core.storable import without_surrogates

__all__ = [
    "MalformedInput",
    "as_dict",
    "as_float",
    "as_int",
    "as_list",
    "as_str",
    "cut",
    "decode_json",
    "load_object",
    "need_dict",
    "need_list",
    "need_str",
]


class MalformedInput(Exception):
    """A line of the wrong shape (raised inside parsers only: ``feed`` counts it)."""


def need_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise MalformedInput(f"{what} is not a string")
    return value


def need_dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedInput(f"{what} is not an object")
    return value


def need_list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise MalformedInput(f"{what} is not a list")
    return value


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_int(value: Any, *, floats: bool = False) -> int | None:
    """An int (never a bool: a CLI sending ``true`` for a count is wrong, not 1); with
    ``floats`` a finite float too, truncated (``json`` accepts ``Infinity`` and ``NaN``)."""
    if type(value) is int:  # the usual case, at once (a bool's type is bool)
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if floats and isinstance(value, float) and math.isfinite(value):
        return int(value)
    return None


def as_float(value: Any) -> float | None:
    """A finite number as a float (never a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def cut(text: str, limit: int) -> str:
    """``text`` shortened to ``limit`` characters, the last one an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def decode_json(text: str) -> Any:
    """``text`` decoded as JSON, as ``json.loads`` would decode it; ``ValueError`` (or
    ``RecursionError``) when it is not JSON.

    orjson decodes a CLI's line in about a third of the standard library's time, and the
    decoder is half of what a parser spends on a line (``make bench``, section parsers).
    What orjson refuses and the standard library accepts (a lone surrogate escape, ``NaN``,
    nesting deeper than orjson's limit) is decoded by the standard library, a lone
    surrogate as U+FFFD (``runtime.core.storable``: no UTF-8 text could hold it). One difference
    remains, orjson's choice: an integer wider than 64 bits reads as a float, not an int.
    """
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return without_surrogates(json.loads(text))


def load_object(line: str) -> dict[str, Any]:
    """One line's JSON object; ``MalformedInput`` for anything else (blank, not JSON, too
    deeply nested, not an object)."""
    try:
        obj = orjson.loads(line)  # decode_json inlined: this is every parser's hot path
    except orjson.JSONDecodeError:
        try:
            obj = without_surrogates(json.loads(line))
        except (ValueError, RecursionError) as exc:
            raise MalformedInput("not JSON") from exc
    if not isinstance(obj, dict):
        raise MalformedInput("not an object")
    return obj

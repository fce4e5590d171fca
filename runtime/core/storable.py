"""Text Spindle can store, send and show: no lone UTF-16 surrogate.

JSON can spell one (``"\\ud800"``: a string cut inside an emoji by a JavaScript client, or
an agent's output), and Python's ``json`` decodes it into a ``str`` that has no UTF-8 form:
no log row, web page or platform call could hold it. Where text comes in (agent output,
the web chat's requests, every action ingress posts) such code points become U+FFFD.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["storable", "without_surrogates"]

_SURROGATE = re.compile("[\ud800-\udfff]")
M = TypeVar("M", bound=BaseModel)


def without_surrogates(value: Any) -> Any:
    """``value`` (JSON data: str, list, dict ...) with every surrogate code point in its
    strings, keys included, replaced by U+FFFD; the same object when it had none."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value) if _SURROGATE.search(value) else value
    if isinstance(value, list | tuple):
        return type(value)(without_surrogates(v) for v in value)
    if isinstance(value, dict):
        return {without_surrogates(k): without_surrogates(v) for k, v in value.items()}
    return value


def storable(model: M) -> M:
    """``model`` itself when it serializes, else a copy whose strings lost their surrogates
    (validated again: the copy is what the model's own validation makes of the text)."""
    try:
        model.model_dump_json()
        return model
    except ValueError:  # pydantic_core.PydanticSerializationError: "surrogates not allowed"
        return type(model).model_validate(without_surrogates(model.model_dump()))

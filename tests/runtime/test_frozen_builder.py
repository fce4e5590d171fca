"""``Frozen.builder``: the instance it builds is the one ``trusted`` (and validation) builds."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from threadspindle.runtime.core.agent_events import (
    AgentError,
    TextDelta,
    ToolStarted,
    TurnAborted,
    TurnCompleted,
    Usage,
)
from threadspindle.runtime.core.frozen import Frozen

CASES: list[tuple[type[Frozen], dict[str, Any]]] = [
    (TextDelta, {"text": "Hello", "block": "msg_1:0"}),
    (TextDelta, {"text": "no block"}),
    (ToolStarted, {"tool_id": "t1", "name": "Bash", "display_name": "Bash"}),
    (TurnAborted, {"reason": "interrupted"}),
    (AgentError, {"message": "overloaded", "retryable": True, "attempt": 2}),
    (
        TurnCompleted,
        {
            "session_id": "s",
            "cost_usd": 0.5,
            "usage": Usage(input_tokens=3, context_window=200_000),
            "is_error": False,
        },
    ),
]


@pytest.mark.parametrize(("cls", "values"), CASES)
def test_builder_builds_what_trusted_and_validation_build(
    cls: type[Frozen], values: dict[str, Any]
) -> None:
    build = cls.builder(*values)
    built = build(*values.values())
    trusted = cls.trusted(**values)
    validated = cls(**values)
    assert type(built) is cls
    assert built == trusted == validated
    assert hash(built) == hash(validated)
    # The same fields in the same order: a logged action reads the same whichever built it.
    assert list(built.__dict__.items()) == list(validated.__dict__.items())
    assert built.model_dump_json() == validated.model_dump_json()
    assert built.model_fields_set == validated.model_fields_set == set(values)
    assert built.model_dump(exclude_unset=True) == validated.model_dump(exclude_unset=True)
    assert pickle.loads(pickle.dumps(built)) == validated
    assert repr(built) == repr(validated)
    # By name as well as in order; each call a new instance; still frozen.
    again = build(**values)
    assert again == built and again is not built
    with pytest.raises(ValueError):
        setattr(built, next(iter(values)), None)


def test_builder_refuses_what_it_cannot_build() -> None:
    with pytest.raises(TypeError, match="must be given"):
        TextDelta.builder("block")  # text has no default
    with pytest.raises(TypeError, match="unknown or repeated"):
        TextDelta.builder("text", "colour")
    with pytest.raises(TypeError, match="unknown or repeated"):
        TextDelta.builder("text", "text")

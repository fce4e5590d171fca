"""A generic command's stdout -> typed agent events (pure): one line in, one ``ParsedLine``
out.

Plain text is answer text (``TextDelta``, one per line, newline kept). A JSON object with a
``type`` is an event: ``text``, ``thinking``, ``tool_start`` (``id``, ``name``, ``input``),
``tool_end`` (``id``, ``result``, ``is_error``), ``error`` (``message``, ``retryable``),
``session`` (``id``, ``model``), and ``result`` (``session_id``, ``cost_usd``, ``model``,
``is_error``, ``error``, ``usage``: kept in ``result`` for the ``TurnCompleted`` the adapter
sends at exit). Another ``type`` is skipped and counted; a known type with wrong fields is
malformed.
"""

from __future__ import annotations

import json
from typing import Any

from threadspindle.agents.base.fields import MalformedInput, decode_json, need_str
from threadspindle.agents.base.parsing import ParsedLine, ParserStats, clean_tool_name
from threadspindle.runtime.core.agent_events import (
    AgentError,
    AgentEvent,
    SessionStarted,
    TextDelta,
    ThinkingDelta,
    ToolFinished,
    ToolStarted,
    TurnCompleted,
)

__all__ = ["CommandLineParser"]


def _text(obj: dict[str, Any], key: str, default: str | None = None) -> str:
    return need_str(obj.get(key, default), key)


class CommandLineParser:
    """One stdout line of a generic command -> events (see the module docstring)."""

    def __init__(self) -> None:
        self.stats = ParserStats()
        self.result: dict[str, Any] = {}  # the last {"type": "result"} line's details
        self._tool_ids = 0

    def feed(self, line: str) -> ParsedLine:
        """What one stdout line means. Never raises."""
        self.stats.lines += 1
        try:
            obj = decode_json(line) if line.lstrip().startswith("{") else None
        except (ValueError, RecursionError):
            obj = None  # text that merely starts with "{" is still text
        try:
            events = self._events(line, obj)
        except (MalformedInput, ValueError, TypeError):
            self.stats.malformed += 1
            return ParsedLine()
        self.stats.events += len(events)
        return ParsedLine(events)

    def _events(self, line: str, obj: Any) -> list[AgentEvent]:
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            return [TextDelta(text=line + "\n")]
        kind = obj["type"]
        if kind == "text":
            return [TextDelta(text=_text(obj, "text"))]
        if kind == "thinking":
            return [ThinkingDelta(text=_text(obj, "text"))]
        if kind == "tool_start":
            self._tool_ids += 1
            name = _text(obj, "name")
            tool_input = obj.get("input", "")
            summary = tool_input if isinstance(tool_input, str) else json.dumps(tool_input)
            return [
                ToolStarted(
                    tool_id=_text(obj, "id", f"tool{self._tool_ids}"),
                    name=name,
                    display_name=clean_tool_name(name),
                    input_summary=summary[:300],
                )
            ]
        if kind == "tool_end":
            is_error = obj.get("is_error", False)
            if not isinstance(is_error, bool):
                raise MalformedInput("is_error")
            result = _text(obj, "result", "")
            return [ToolFinished(tool_id=_text(obj, "id"), result=result, is_error=is_error)]
        if kind == "error":
            return [
                AgentError(message=_text(obj, "message"), retryable=obj.get("retryable") is True)
            ]
        if kind == "session":
            model = obj.get("model")
            return [
                SessionStarted(
                    session_id=_text(obj, "id"), model=model if isinstance(model, str) else None
                )
            ]
        if kind == "result":
            # Validated now, so a bad result line is counted here and not at exit.
            fields = set(TurnCompleted.model_fields) - {"type"}
            self.result = TurnCompleted.model_validate(
                {k: v for k, v in obj.items() if k in fields}
            ).model_dump(exclude_none=True, exclude={"type"})
            self.stats.skip("result")
            return []
        self.stats.skip(kind)
        return []

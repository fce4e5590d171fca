"""``opencode run --format json`` (the per-turn fall-back) -> typed agent events (pure).

Lines: ``step_start``, ``text`` with the whole part (no deltas in this mode), ``tool_use``
once finished, ``step_finish`` and ``error``; the turn ends at a ``step_finish`` whose reason
is not ``tool-calls`` (``turn_ended``). Malformed lines are counted, never raised.
"""

from __future__ import annotations

import json
from typing import Any

from threadspindle.agents.base.parsing import ParsedLine, ParserStats
from threadspindle.agents.opencode.parser import (
    Turn,
    display_name,
    error_message,
    input_summary,
    load_event,
)
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

__all__ = ["OpencodeRunParser"]


class OpencodeRunParser:
    """``opencode run --format json`` stdout, one line at a time (per-turn fall-back)."""

    def __init__(self, stats: ParserStats | None = None) -> None:
        self.stats = stats if stats is not None else ParserStats()
        self.session_id: str | None = None
        self.completed = False
        self.error: str | None = None
        self._turn = Turn()

    def feed(self, line: str) -> ParsedLine:
        """What one stdout line means. Never raises."""
        obj = load_event(line, self.stats)
        if obj is None:
            return ParsedLine()
        completed = self.completed
        try:
            events = self._dispatch(obj)
        except (AttributeError, KeyError, TypeError, ValueError, OverflowError):
            self.stats.malformed += 1
            return ParsedLine()
        self.stats.events += len(events)
        return ParsedLine(events, turn_ended=self.completed and not completed)

    def _dispatch(self, obj: dict[str, Any]) -> list[AgentEvent]:
        kind = obj["type"]
        events: list[AgentEvent] = []
        sid = obj.get("sessionID")
        if isinstance(sid, str) and sid != self.session_id:
            self.session_id = sid
            # The frequent events are built without validation (``Frozen.trusted``): each
            # value is checked here (a str, or None where the field allows it) first.
            events.append(SessionStarted.trusted(session_id=sid))
        part = obj.get("part")
        if kind == "text" and isinstance(part, dict):
            text = part["text"]
            if not isinstance(text, str):
                raise TypeError("text part without text")
            if text:
                block = part.get("id")
                if block is not None and not isinstance(block, str):
                    raise TypeError("text part with an id that is no string")
                events.append(TextDelta.trusted(text=text, block=block))
        elif kind == "reasoning" and isinstance(part, dict):
            text = part["text"]
            if not isinstance(text, str):
                raise TypeError("reasoning part without text")
            if text:
                events.append(ThinkingDelta.trusted(text=text))
        elif kind == "tool_use" and isinstance(part, dict):
            events.extend(self._tool(part))
        elif kind == "step_finish" and isinstance(part, dict):
            self._turn.add_step(part)
            if part.get("reason") != "tool-calls":
                self.completed = True
                events.append(
                    TurnCompleted(
                        session_id=self.session_id,
                        cost_usd=self._turn.cost,
                        usage=self._turn.usage,
                        is_error=self.error is not None,
                        error=self.error,
                    )
                )
        elif kind == "error":
            self.error = error_message(obj.get("error"))
            events.append(AgentError(message=self.error, retryable=False))
        if not events:
            self.stats.skip(kind)
        return events

    def _tool(self, part: dict[str, Any]) -> list[AgentEvent]:
        state, tool = part["state"], part["tool"]
        if not isinstance(tool, str) or not isinstance(state, dict):
            raise TypeError("tool part without tool or state")
        call_id = part.get("callID") or part.get("id") or tool
        events: list[AgentEvent] = [
            ToolStarted.trusted(
                tool_id=str(call_id),
                name=tool,
                display_name=display_name(tool),
                input_summary=input_summary(tool, state),
            )
        ]
        if state.get("status") == "error":
            events.append(
                ToolFinished.trusted(
                    tool_id=str(call_id), result=str(state.get("error")), is_error=True
                )
            )
        else:
            output = state.get("output")
            result = output if isinstance(output, str) else json.dumps(output, default=str)
            events.append(ToolFinished.trusted(tool_id=str(call_id), result=result))
        return events

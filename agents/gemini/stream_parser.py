"""``gemini -p -o stream-json`` (the per-turn fall-back) -> typed agent events: pure, one line
in, one ``ParsedLine`` out (``fixtures/agent-cli/REPORT.md`` section 3).

Lines: ``init`` (the session), ``message``, ``tool_use``, ``tool_result``, ``error``, and
``result``, which ends the turn (``turn_ended``). Malformed lines are counted, never raised;
well-formed ones with no common meaning are counted as skipped, by kind.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from threadspindle.agents.base.fields import as_int, load_object, need_str
from threadspindle.agents.base.parsing import ParsedLine, ParserStats
from threadspindle.agents.gemini.parser import (
    BAD_INPUT,
    display_tool_name,
    error_text,
    label,
    short,
)
from threadspindle.runtime.core.agent_events import (
    AgentError,
    AgentEvent,
    SessionStarted,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnCompleted,
    Usage,
)

__all__ = ["StreamJsonParser"]


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _count(value: Any) -> int | None:
    return as_int(value, floats=True)


@dataclass
class StreamJsonParser:
    """One ``gemini -p -o stream-json`` process's stdout lines -> events."""

    mcp_servers: tuple[str, ...] = ()
    stats: ParserStats = field(default_factory=ParserStats)
    session_id: str | None = None
    model: str | None = None
    finished: bool = False  # a ``result`` line was seen: the turn ended normally
    results: int = 0

    def feed(self, line: str) -> ParsedLine:
        """What one stdout line means. Never raises."""
        self.stats.lines += 1
        results = self.results
        try:
            events = self._parse(load_object(line))
        except BAD_INPUT:
            self.stats.malformed += 1
            return ParsedLine()
        self.stats.events += len(events)
        return ParsedLine(events, turn_ended=self.results > results)

    def _parse(self, msg: dict[str, Any]) -> list[AgentEvent]:
        kind = need_str(msg.get("type"), "type")
        if kind == "init":
            self.session_id = need_str(msg.get("session_id"), "session_id")
            self.model = _opt_str(msg.get("model"))
            return [SessionStarted(session_id=self.session_id, model=self.model)]
        if kind == "message":
            role = msg.get("role")
            content = need_str(msg.get("content"), "content")
            if role == "assistant" and content:
                return [TextDelta(text=content)]
            self.stats.skip(f"message:{label(role)}")
            return []
        if kind == "tool_use":
            tool_id = need_str(msg.get("tool_id"), "tool_id")
            name = need_str(msg.get("tool_name"), "tool_name")
            params = msg.get("parameters")
            return [
                ToolStarted(
                    tool_id=tool_id,
                    name=name,
                    display_name=display_tool_name(name, self.mcp_servers),
                    input_summary=_tool_input_summary(params),
                )
            ]
        if kind == "tool_result":
            tool_id = need_str(msg.get("tool_id"), "tool_id")
            status = msg.get("status")
            output = msg.get("output")
            error = msg.get("error")
            result = output if isinstance(output, str) else ""
            if not result and error is not None:
                result = error_text(error)
            return [ToolFinished(tool_id=tool_id, result=result, is_error=status != "success")]
        if kind == "error":
            return [AgentError(message=error_text(msg.get("message") or msg), retryable=False)]
        if kind == "result":
            end = self._result(msg)
            self.finished = True
            self.results += 1
            return [end]
        self.stats.skip(label(kind))
        return []

    def _result(self, msg: dict[str, Any]) -> TurnCompleted:
        raw_stats = msg.get("stats")
        stats: dict[str, Any] = raw_stats if isinstance(raw_stats, dict) else {}
        models = stats.get("models")
        model = self.model
        if isinstance(models, dict) and models:
            model = next(iter(models))
        usage = Usage(
            input_tokens=_count(stats.get("input_tokens")),
            output_tokens=_count(stats.get("output_tokens")),
            cache_read_tokens=_count(stats.get("cached")),
        )
        ok = msg.get("status") == "success"
        return TurnCompleted(
            session_id=self.session_id,
            duration_ms=_count(stats.get("duration_ms")),
            usage=usage,
            model=model,
            is_error=not ok,
            error=None if ok else error_text(msg.get("error") or msg.get("status")),
        )


def _tool_input_summary(params: Any) -> str:
    if isinstance(params, dict):
        for key in ("command", "file_path", "path", "pattern", "url", "query"):
            if isinstance(params.get(key), str):
                return short(params[key])
        try:
            return short(json.dumps(params, ensure_ascii=False))
        except (TypeError, ValueError):
            return ""
    return ""

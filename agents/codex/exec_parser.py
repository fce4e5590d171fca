"""``codex exec --json`` stdout (one JSON event a line) -> typed agent events (pure).

The per-turn fall-back's format (``REPORT.md`` section 2): ``thread.started`` (the session
id), ``turn.started``, ``item.started``/``item.completed`` of ``command_execution``,
``file_change``, ``mcp_tool_call``, ``web_search``, ``agent_message``, ``reasoning`` and
``error`` (a warning), then ``turn.completed`` (usage) or ``turn.failed``; ``error`` lines
are retries ("Reconnecting...") or the final error, which ``turn.failed`` repeats. Text is
not streamed: each ``agent_message`` arrives whole. Malformed lines are counted, never
raised.
"""

from __future__ import annotations

import json
from typing import Any

from threadspindle.agents.base.fields import as_dict, as_int, as_list, as_str, cut, decode_json
from threadspindle.agents.base.parsing import ParsedLine, ParserStats, clean_tool_name
from threadspindle.agents.codex.parser import (
    MAX_RESULT_CHARS,
    MAX_SUMMARY_CHARS,
    shell_command_summary,
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
    Usage,
)

__all__ = ["ExecParser"]


class ExecParser:
    """``codex exec --json`` stdout (one JSON event a line) -> agent events.

    Text is not streamed in this mode: each ``agent_message`` arrives whole.
    """

    def __init__(self) -> None:
        self.stats = ParserStats()
        self.session_id: str | None = None
        self.model: str | None = None
        self.ended = False  # turn.completed / turn.failed seen
        self.held_error: str | None = None  # a final error waiting for its turn.failed

    def feed(self, line: str) -> ParsedLine:
        """What one stdout line means. Never raises."""
        self.stats.lines += 1
        if not line or line.isspace():
            self.stats.skip("blank")
            return ParsedLine()
        try:
            msg = decode_json(line)
        except (ValueError, RecursionError):
            self.stats.malformed += 1
            return ParsedLine()
        if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
            self.stats.malformed += 1
            return ParsedLine()
        ended = self.ended
        try:
            events = self._event(msg)
        except Exception:  # an unforeseen shape must not end the turn's reader
            self.stats.malformed += 1
            return ParsedLine()
        self.stats.events += len(events)
        return ParsedLine(events, turn_ended=self.ended and not ended)

    def _event(self, msg: dict[str, Any]) -> list[AgentEvent]:
        kind: str = msg["type"]
        if kind == "thread.started":
            tid = as_str(msg.get("thread_id"))
            if tid is None:
                self.stats.malformed += 1
                return []
            self.session_id = tid
            return [SessionStarted(session_id=tid, model=self.model)]
        if kind in ("item.started", "item.updated", "item.completed"):
            return self._item(kind, as_dict(msg.get("item")))
        if kind == "turn.completed":
            self.ended = True
            held, self.held_error = self.held_error, None
            raw = as_dict(msg.get("usage"))
            usage = Usage(
                input_tokens=as_int(raw.get("input_tokens")),
                output_tokens=as_int(raw.get("output_tokens")),
                cache_read_tokens=as_int(raw.get("cached_input_tokens")),
                cache_write_tokens=as_int(raw.get("cache_write_input_tokens")),
            )
            done = TurnCompleted(session_id=self.session_id, usage=usage, model=self.model)
            return [AgentError(message=held), done] if held else [done]
        if kind == "turn.failed":
            self.ended = True
            held, self.held_error = self.held_error, None
            message = as_str(as_dict(msg.get("error")).get("message")) or held or "the turn failed"
            return [
                TurnCompleted(
                    session_id=self.session_id, model=self.model, is_error=True, error=message
                )
            ]
        if kind == "error":
            message = as_str(msg.get("message")) or "codex reported an error"
            # "Reconnecting... 2/5" is codex retrying by itself; a final failure says otherwise.
            if message.startswith("Reconnecting"):
                return [AgentError(message=message, retryable=True)]
            # A final error is followed by turn.failed with the same text: told once, there.
            self.held_error = message
            self.stats.skip("error:held")
            return []
        self.stats.skip(kind)
        return []

    def _item(self, kind: str, item: dict[str, Any]) -> list[AgentEvent]:
        item_type, item_id = as_str(item.get("type")), as_str(item.get("id"))
        if item_type is None:
            self.stats.malformed += 1
            return []
        if item_type in ("agent_message", "reasoning") and kind == "item.completed":
            text = as_str(item.get("text")) or ""
            if not text:
                self.stats.skip(f"{kind}:{item_type}:empty")
                return []
            if item_type == "reasoning":
                return [ThinkingDelta(text=text)]
            return [TextDelta(text=text, block=item_id)]
        if item_type == "error" and kind == "item.completed":
            # Non-fatal warnings (e.g. unknown model metadata): the turn goes on.
            message = as_str(item.get("message")) or "codex warning"
            return [AgentError(message=message, retryable=True)]
        if item_id is None:
            self.stats.skip(f"{kind}:{item_type}")
            return []
        if kind == "item.started":
            started = self._tool_started(item_type, item_id, item)
            if started is not None:
                return [started]
        elif kind == "item.completed":
            finished = self._tool_finished(item_type, item_id, item)
            if finished is not None:
                return [finished]
        self.stats.skip(f"{kind}:{item_type}")
        return []

    @staticmethod
    def _tool_started(item_type: str, item_id: str, item: dict[str, Any]) -> ToolStarted | None:
        if item_type == "command_execution":
            name, summary = "Shell", shell_command_summary(as_str(item.get("command")) or "")
        elif item_type == "file_change":
            paths = [as_str(as_dict(c).get("path")) or "" for c in as_list(item.get("changes"))]
            name, summary = "Edit", "\n".join(p for p in paths if p)
        elif item_type == "mcp_tool_call":
            server, tool = as_str(item.get("server")) or "mcp", as_str(item.get("tool")) or "tool"
            name = f"mcp__{server}__{tool}"
            summary = json.dumps(item.get("arguments"), default=str)
        elif item_type == "web_search":
            name, summary = "WebSearch", as_str(item.get("query")) or ""
        else:
            return None
        return ToolStarted(
            tool_id=item_id,
            name=name,
            display_name=clean_tool_name(name),
            input_summary=cut(summary, MAX_SUMMARY_CHARS),
        )

    @staticmethod
    def _tool_finished(item_type: str, item_id: str, item: dict[str, Any]) -> ToolFinished | None:
        status = as_str(item.get("status")) or ""
        failed = status in ("failed", "declined")
        if item_type == "command_execution":
            result = as_str(item.get("aggregated_output")) or ""
            code = as_int(item.get("exit_code"))
            failed = failed or (code is not None and code != 0)
        elif item_type == "file_change":
            paths = [as_str(as_dict(c).get("path")) or "" for c in as_list(item.get("changes"))]
            result = "\n".join(p for p in paths if p) or status
        elif item_type == "mcp_tool_call":
            err = item.get("error")
            failed = failed or bool(err)
            if err:
                result = as_str(as_dict(err).get("message")) or json.dumps(err, default=str)
            else:
                res = as_dict(item.get("result"))
                texts = [as_str(as_dict(c).get("text")) for c in as_list(res.get("content"))]
                result = "\n".join(t for t in texts if t)
        elif item_type == "web_search":
            result = status
        else:
            return None
        return ToolFinished(tool_id=item_id, result=cut(result, MAX_RESULT_CHARS), is_error=failed)

"""``opencode serve``'s event bus -> typed agent events (pure: no I/O, no clock); the
per-turn ``opencode run --format json`` lines are read by ``run_parser.py`` with the helpers
here.

``OpencodeEventParser`` reads one session's events of the SSE bus (``GET /event``): one JSON
object ``{"type": ..., "properties": {...}}`` per ``data:`` line, already routed to the
session by the server (``session_of``; ``feed_event`` takes it decoded, ``feed`` as a line).
Text and reasoning arrive as real deltas (``message.part.delta``); tools as a part whose
``state.status`` goes ``pending`` -> ``running`` -> ``completed``/``error``; the turn ends
with ``session.idle`` (``turn_ended``), preceded by ``session.error``
``MessageAbortedError`` when it was aborted.

Invariants: a malformed input (not JSON, not an object, wrong field types) is counted in
``ParserStats.malformed`` and skipped; a well-formed event with no common meaning is counted
in ``skipped`` (by type); nothing raises. Text already streamed as deltas is never emitted
twice when the completed part arrives. A ``session.idle`` seen before the new turn started
(a stale one from the previous turn) does not end it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from threadspindle.agents.base.fields import as_dict, as_float, as_int, decode_json
from threadspindle.agents.base.parsing import ParsedLine, ParserStats, clean_tool_name
from threadspindle.runtime.core.agent_events import (
    AgentError,
    AgentEvent,
    PermissionRequested,
    QuestionAsked,
    TextDelta,
    ThinkingDelta,
    TitleChanged,
    ToolFinished,
    ToolStarted,
    TurnAborted,
    TurnCompleted,
    Usage,
)

__all__ = [
    "ABORTED_ERROR",
    "OpencodeEventParser",
    "Turn",
    "display_name",
    "error_message",
    "input_summary",
    "load_event",
    "session_of",
]

ABORTED_ERROR = "MessageAbortedError"
SUMMARY_LIMIT = 300
_PLACEHOLDER_TITLE = "New session - "  # OpenCode's name for a session not titled yet
# Events that carry no meaning for a chat thread (bookkeeping, UI, background noise).
_NOISE = frozenset(
    {
        "server.connected",
        "server.heartbeat",
        "plugin.added",
        "catalog.updated",
        "reference.updated",
        "integration.updated",
        "session.created",
        "session.diff",
        "session.compacted",
        "permission.replied",
        "question.replied",
        "question.rejected",
        "file.edited",
        "file.watcher.updated",
        "todo.updated",
        "lsp.updated",
        "lsp.client.diagnostics",
        "message.removed",
        "message.part.removed",
        "vcs.branch.updated",
        "project.updated",
        "installation.updated",
        "command.executed",
        "mcp.tools.changed",
    }
)


# An MCP tool of a server the adapter registered per thread: ``<name>-<10 hex>_<tool>``.
_REGISTERED_MCP_TOOL = re.compile(r"^(?P<server>.+)-[0-9a-f]{10}_(?P<tool>.+)$")


def display_name(tool: str) -> str:
    """A tool's name for display: ``process-manager-0123456789_start_process`` (an MCP tool
    the adapter registered) -> ``Process Manager · Start Process``; others as opencode
    names them (``bash``, ``read``, ``myserver_tool``)."""
    match = _REGISTERED_MCP_TOOL.match(tool)
    if match:
        return clean_tool_name(f"mcp__{match['server']}__{match['tool']}")
    return clean_tool_name(tool)


def session_of(event: Any) -> str | None:
    """The session an SSE event belongs to (``properties.sessionID``, or the part's/info's)."""
    if not isinstance(event, dict):
        return None
    props = event.get("properties")
    if not isinstance(props, dict):
        return None
    sid = props.get("sessionID")
    if isinstance(sid, str):
        return sid
    for key in ("part", "info"):
        inner = props.get(key)
        if isinstance(inner, dict) and isinstance(inner.get("sessionID"), str):
            return str(inner["sessionID"])
    return None


def error_message(error: Any) -> str:
    """``{"name": ..., "data": {"message": ...}}`` -> a readable one-liner."""
    if not isinstance(error, dict):
        return str(error) if error else "unknown error"
    name = error.get("name") if isinstance(error.get("name"), str) else "Error"
    data = error.get("data")
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, str) and message:
        return f"{name}: {message}"
    return str(name)


def _is_retryable(error: Any) -> bool:
    data = error.get("data") if isinstance(error, dict) else None
    return bool(isinstance(data, dict) and data.get("isRetryable") is True)


def input_summary(tool: str, state: dict[str, Any]) -> str:
    """A short description of a tool call: the shell command, a path, or compact JSON."""
    raw = state.get("input")
    tool_input: dict[str, Any] = raw if isinstance(raw, dict) else {}
    for key in ("command", "filePath", "path", "pattern", "url", "description"):
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            return value[:SUMMARY_LIMIT]
    title = state.get("title")
    if isinstance(title, str) and title:
        return title[:SUMMARY_LIMIT]
    if tool_input:
        return json.dumps(tool_input, ensure_ascii=False, default=str)[:SUMMARY_LIMIT]
    return ""


def _int(value: Any) -> int | None:
    return as_int(value, floats=True)


def _usage_of(tokens: Any) -> Usage | None:
    if not isinstance(tokens, dict):
        return None
    cache = as_dict(tokens.get("cache"))
    return Usage(
        input_tokens=_int(tokens.get("input")),
        output_tokens=_int(tokens.get("output")),
        cache_read_tokens=_int(cache.get("read")),
        cache_write_tokens=_int(cache.get("write")),
    )


def _add_usage(total: Usage | None, more: Usage | None) -> Usage | None:
    if more is None:
        return total
    if total is None:
        return more

    def plus(a: int | None, b: int | None) -> int | None:
        return None if a is None and b is None else (a or 0) + (b or 0)

    return Usage(
        input_tokens=plus(total.input_tokens, more.input_tokens),
        output_tokens=plus(total.output_tokens, more.output_tokens),
        cache_read_tokens=plus(total.cache_read_tokens, more.cache_read_tokens),
        cache_write_tokens=plus(total.cache_write_tokens, more.cache_write_tokens),
    )


def load_event(line: str, stats: ParserStats) -> dict[str, Any] | None:
    """One event (a JSON object with a string ``type``; an SSE ``data:`` prefix allowed),
    counting the line; None (counted malformed) when it is not one."""
    stats.lines += 1
    text = line.strip()
    if text.startswith("data:"):
        text = text[5:].strip()
    try:
        obj = decode_json(text)
    except (ValueError, RecursionError):
        stats.malformed += 1
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        stats.malformed += 1
        return None
    return obj


@dataclass
class Turn:
    """What one turn has accumulated towards its ``TurnCompleted`` (both parsers)."""

    cost: float | None = None
    usage: Usage | None = None
    model: str | None = None
    error: str | None = None
    failure: str | None = None  # the adapter gave up on the turn (reported as its error)
    aborted: bool = False
    first_created: int | None = None
    last_completed: int | None = None
    steps: set[str] = field(default_factory=set)

    def add_step(self, part: dict[str, Any]) -> None:
        pid = part.get("id")
        if isinstance(pid, str):
            if pid in self.steps:
                return
            self.steps.add(pid)
        cost = as_float(part.get("cost"))
        if cost is not None:
            self.cost = (self.cost or 0.0) + cost
        self.usage = _add_usage(self.usage, _usage_of(part.get("tokens")))

    def duration_ms(self) -> int | None:
        if self.first_created is None or self.last_completed is None:
            return None
        return max(0, self.last_completed - self.first_created)


class OpencodeEventParser:
    """One session's view of the ``opencode serve`` event bus.

    ``begin_turn()`` is called when a prompt is sent: the turn then waits for a sign of life
    (``session.status busy``, an error, a permission request) before a ``session.idle`` may
    end it, so a stale idle from the previous turn is ignored.
    """

    def __init__(self, session_id: str | None = None, stats: ParserStats | None = None) -> None:
        self.session_id = session_id
        self.stats = stats if stats is not None else ParserStats()
        self.turn_state = "idle"  # idle | pending (prompt sent) | running
        self._turn = Turn()
        self._roles: dict[str, str] = {}
        self._part_kinds: dict[str, str] = {}
        # part id -> the text already emitted for it, as chunks joined only when read
        # (appending to a string would copy it on every delta: quadratic on long answers)
        self._streamed: dict[str, list[str]] = {}
        self._delta_parts: set[str] = set()  # parts that streamed deltas
        self._tools_started: set[str] = set()
        self._tools_finished: set[str] = set()
        self.retries = 0  # ``session.status retry`` seen in this turn
        self.last_retry_message = ""
        self.title: str | None = None  # the session's title as last reported

    # turn bookkeeping ---------------------------------------------------------------------
    @property
    def turn_open(self) -> bool:
        return self.turn_state != "idle"

    def begin_turn(self) -> None:
        self.turn_state = "pending"
        self._turn = Turn()
        self.retries = 0
        self.last_retry_message = ""

    def fail_turn(self, message: str) -> None:
        """The adapter gave up on the open turn (and aborts it): when it ends, it ends as a
        failed completion carrying ``message`` rather than as a user interrupt."""
        if self.turn_open:
            self._turn.failure = message

    def end_turn_aborted(self, reason: str) -> list[AgentEvent]:
        """Close an open turn from outside (the adapter's watchdog); nothing when closed."""
        if not self.turn_open:
            return []
        self.turn_state = "idle"
        return self._count([TurnAborted(reason=reason)])

    def _alive(self) -> None:
        if self.turn_state == "pending":
            self.turn_state = "running"

    def _count(self, events: list[AgentEvent]) -> list[AgentEvent]:
        self.stats.events += len(events)
        return events

    # input ------------------------------------------------------------------------------
    def feed(self, line: str) -> ParsedLine:
        """One SSE ``data:`` payload (JSON text). Never raises."""
        obj = load_event(line, self.stats)
        if obj is None:
            return ParsedLine()
        return self._dispatch(obj)

    def feed_event(self, event: Any) -> ParsedLine:
        """One decoded event object (the server decoded it to route it). Never raises."""
        self.stats.lines += 1
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            self.stats.malformed += 1
            return ParsedLine()
        return self._dispatch(event)

    def _dispatch(self, event: dict[str, Any]) -> ParsedLine:
        kind: str = event["type"]
        props = event.get("properties")
        if not isinstance(props, dict):
            self.stats.malformed += 1
            return ParsedLine()
        was_open = self.turn_open
        try:
            handler = _HANDLERS.get(kind)
            if handler is None:
                self.stats.skip(kind)
                return ParsedLine()
            events = self._count(handler(self, props))
        except (AttributeError, KeyError, TypeError, ValueError, OverflowError):
            # A field of an unexpected type: the event is malformed, the stream goes on.
            self.stats.malformed += 1
            return ParsedLine()
        return ParsedLine(events, turn_ended=was_open and not self.turn_open)

    # handlers ---------------------------------------------------------------------------
    def _on_noise(self, props: dict[str, Any]) -> list[AgentEvent]:
        raise _Skip

    def _on_session_updated(self, props: dict[str, Any]) -> list[AgentEvent]:
        """The session's title (OpenCode names a session after its first exchange): the
        thread follows it. Its placeholder ``New session - <time>`` is no title."""
        info = props["info"]
        title = info.get("title") if isinstance(info, dict) else None
        if (
            not isinstance(title, str)
            or not title.strip()
            or title.startswith(_PLACEHOLDER_TITLE)
            or title == self.title
        ):
            raise _Skip
        self.title = title
        return [TitleChanged(title=title)]

    def _on_status(self, props: dict[str, Any]) -> list[AgentEvent]:
        status = props["status"]
        kind = status["type"]
        if kind == "busy":
            self._alive()
            raise _Skip
        if kind == "retry":
            self._alive()
            self.retries += 1
            message = status.get("message")
            text = message if isinstance(message, str) and message else "retrying"
            self.last_retry_message = text
            attempt = _int(status.get("attempt"))
            return [
                AgentError(
                    message=f"model request failed, retrying: {text}",
                    retryable=True,
                    attempt=attempt if attempt is not None else self.retries,
                )
            ]
        raise _Skip  # idle: session.idle is the one we act on

    def _on_idle(self, props: dict[str, Any]) -> list[AgentEvent]:
        if self.turn_state != "running":
            raise _Skip  # no turn, or a stale idle from before this turn started
        self.turn_state = "idle"
        turn = self._turn
        if turn.aborted and turn.failure is None:
            return [TurnAborted(reason="interrupted")]
        error = turn.failure or turn.error
        return [
            TurnCompleted(
                session_id=self.session_id,
                cost_usd=turn.cost,
                duration_ms=turn.duration_ms(),
                usage=turn.usage,
                model=turn.model,
                is_error=error is not None,
                error=error,
            )
        ]

    def _on_error(self, props: dict[str, Any]) -> list[AgentEvent]:
        error = props.get("error")
        if isinstance(error, dict) and error.get("name") == ABORTED_ERROR:
            if self.turn_open:
                self._alive()
                self._turn.aborted = True
            raise _Skip
        message = error_message(error)
        if self.turn_open:
            self._alive()
            self._turn.error = message
        return [AgentError(message=message, retryable=_is_retryable(error))]

    def _on_message(self, props: dict[str, Any]) -> list[AgentEvent]:
        info = props["info"]
        mid, role = info.get("id"), info.get("role")
        if isinstance(mid, str) and isinstance(role, str):
            self._roles[mid] = role
        if role == "assistant" and self.turn_state == "running":
            model, provider = info.get("modelID"), info.get("providerID")
            if isinstance(model, str) and model:
                self._turn.model = f"{provider}/{model}" if isinstance(provider, str) else model
            times = as_dict(info.get("time"))
            created, completed = _int(times.get("created")), _int(times.get("completed"))
            if created is not None and self._turn.first_created is None:
                self._turn.first_created = created
            if completed is not None:
                self._turn.last_completed = max(completed, self._turn.last_completed or 0)
        raise _Skip

    def _on_part(self, props: dict[str, Any]) -> list[AgentEvent]:
        part = props["part"]
        kind, pid, mid = part["type"], part.get("id"), part.get("messageID")
        if isinstance(pid, str):
            self._part_kinds[pid] = kind
        if self._roles.get(mid) == "user" or part.get("synthetic") is True:
            raise _Skip  # the prompt echoed back, or context opencode added itself
        if kind in ("text", "reasoning"):
            return self._on_text_part(part, kind)
        if kind == "tool":
            return self._on_tool_part(part)
        if kind == "step-finish":
            if self.turn_open:
                self._turn.add_step(part)
            raise _Skip
        raise _Skip  # step-start, patch, snapshot, file, agent, subtask, compaction ...

    def _on_text_part(self, part: dict[str, Any], kind: str) -> list[AgentEvent]:
        pid = part["id"]
        text = part.get("text")
        times = as_dict(part.get("time"))
        if not isinstance(pid, str) or not isinstance(text, str) or "end" not in times:
            raise _Skip  # a part opening (empty) or an update while deltas stream
        if not self.turn_open:
            raise _Skip  # a late copy after the turn ended (abort): already streamed
        done = "".join(self._streamed.get(pid, ()))
        if pid in self._delta_parts and not text.startswith(done):
            raise _Skip
        rest = text[len(done) :]
        if not rest:
            raise _Skip
        self._streamed[pid] = [text]
        return [self._delta(kind, rest, pid)]

    def _delta(self, kind: str, text: str, pid: str) -> AgentEvent:
        if kind == "reasoning":
            return ThinkingDelta(text=text)
        return TextDelta(text=text, block=pid)

    def _on_part_delta(self, props: dict[str, Any]) -> list[AgentEvent]:
        pid, delta, fld = props["partID"], props["delta"], props.get("field")
        if not isinstance(pid, str) or not isinstance(delta, str):
            raise TypeError("delta without part id or text")
        if fld != "text" or not delta:
            raise _Skip
        if self._roles.get(str(props.get("messageID"))) == "user" or not self.turn_open:
            raise _Skip
        self._alive()
        kind = self._part_kinds.get(pid, "text")
        if kind not in ("text", "reasoning"):
            raise _Skip
        self._delta_parts.add(pid)
        self._streamed.setdefault(pid, []).append(delta)
        return [self._delta(kind, delta, pid)]

    def _on_tool_part(self, part: dict[str, Any]) -> list[AgentEvent]:
        state = part["state"]
        status, tool = state["status"], part.get("tool")
        call_id = part.get("callID") or part.get("id")
        if not isinstance(call_id, str) or not isinstance(tool, str) or not self.turn_open:
            raise _Skip
        if status == "pending":
            raise _Skip  # no input yet; the card opens once it runs (or asks)
        events: list[AgentEvent] = []
        if call_id not in self._tools_started:
            self._tools_started.add(call_id)
            events.append(
                ToolStarted(
                    tool_id=call_id,
                    name=tool,
                    display_name=display_name(tool),
                    input_summary=input_summary(tool, state),
                )
            )
        if status in ("completed", "error") and call_id not in self._tools_finished:
            self._tools_finished.add(call_id)
            if status == "completed":
                output = state.get("output")
                result = output if isinstance(output, str) else json.dumps(output, default=str)
                events.append(ToolFinished(tool_id=call_id, result=result))
            else:
                error = state.get("error")
                events.append(
                    ToolFinished(tool_id=call_id, result=str(error or "error"), is_error=True)
                )
        if not events:
            raise _Skip
        return events

    def _on_permission(self, props: dict[str, Any]) -> list[AgentEvent]:
        request_id, permission = props["id"], props.get("permission")
        if not isinstance(request_id, str):
            raise TypeError("permission without id")
        self._alive()
        patterns = props.get("patterns")
        detail = (
            ", ".join(p for p in patterns if isinstance(p, str))
            if isinstance(patterns, list)
            else ""
        )
        metadata = props.get("metadata")
        if not detail and isinstance(metadata, dict):
            detail = json.dumps(metadata, ensure_ascii=False, default=str)[:SUMMARY_LIMIT]
        tool = permission if isinstance(permission, str) else "tool"
        return [PermissionRequested(request_id=request_id, tool=tool, detail=detail)]

    def _on_question(self, props: dict[str, Any]) -> list[AgentEvent]:
        request_id, questions = props["id"], props["questions"]
        if not isinstance(request_id, str) or not isinstance(questions, list) or not questions:
            raise TypeError("question without id or questions")
        self._alive()
        texts, options, multiple = [], [], False
        for q in questions:
            if not isinstance(q, dict):
                continue
            if isinstance(q.get("question"), str):
                texts.append(q["question"])
            multiple = multiple or q.get("multiple") is True
            for option in q.get("options") or []:
                if isinstance(option, dict) and isinstance(option.get("label"), str):
                    options.append(option["label"])
        return [
            QuestionAsked(
                request_id=request_id,
                question="\n".join(texts) or "?",
                options=tuple(options),
                multiple=multiple,
            )
        ]


class _Skip(Exception):
    """A well-formed event with nothing to say: counted under its type and dropped."""


def _skipping(handler: Any, kind: str) -> Any:
    def run(parser: OpencodeEventParser, props: dict[str, Any]) -> list[AgentEvent]:
        try:
            return handler(parser, props)  # type: ignore[no-any-return]
        except _Skip:
            parser.stats.skip(kind)
            return []

    return run


_HANDLERS: dict[str, Any] = {
    kind: _skipping(fn, kind)
    for kind, fn in {
        **{noise: OpencodeEventParser._on_noise for noise in _NOISE},
        "session.status": OpencodeEventParser._on_status,
        "session.updated": OpencodeEventParser._on_session_updated,
        "session.idle": OpencodeEventParser._on_idle,
        "session.error": OpencodeEventParser._on_error,
        "message.updated": OpencodeEventParser._on_message,
        "message.part.updated": OpencodeEventParser._on_part,
        "message.part.delta": OpencodeEventParser._on_part_delta,
        "permission.asked": OpencodeEventParser._on_permission,
        "question.asked": OpencodeEventParser._on_question,
    }.items()
}

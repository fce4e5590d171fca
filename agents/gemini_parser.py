"""Gemini CLI wire formats -> typed agent events: pure, one line in, events out.

Two formats, one per mode (``fixtures/agent-cli/REPORT.md`` section 3 and
``long-lived/REPORT.md`` section 2):

- ``StreamJsonParser``: the per-turn ``gemini -p -o stream-json`` lines (``init``,
  ``message``, ``tool_use``, ``tool_result``, ``error``, ``result``). ``result`` ends the turn.
- ``AcpParser``: the long-lived ``gemini --acp`` JSON-RPC 2.0 lines. ``session/update``
  notifications become deltas and tool events; ``session/request_permission`` (a request
  from the agent) becomes ``PermissionRequested``; the *response* to ``session/prompt`` is the
  end of the turn (``stopReason`` ``end_turn``/``cancelled``/``max_tokens``/...), and an error
  response to it is a failed turn. Other responses go back to the driver, which matches
  them to its requests by id.

Invariants: nothing here raises on input. A line that is not JSON or has the wrong shape is
counted in ``stats.malformed``; a well-formed line with no common meaning (a command list, a
replayed history chunk, an update outside any turn) is counted in ``stats.skipped`` by kind.
The parsers keep only what they need to translate (known tool ids, pending permission
options, the prompt request id); they do no I/O and read no clock.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from threadspindle.agents.base import ParserStats, clean_tool_name
from threadspindle.runtime.core.agent_events import (
    AgentError,
    AgentEvent,
    PermissionRequested,
    SessionStarted,
    TextDelta,
    ThinkingDelta,
    ToolFinished,
    ToolStarted,
    TurnAborted,
    TurnCompleted,
    Usage,
)

__all__ = [
    "AcpParser",
    "AcpRead",
    "PendingPermission",
    "RpcRequest",
    "RpcResponse",
    "StreamJsonParser",
    "display_tool_name",
    "tool_name_of",
]

MAX_SUMMARY = 200  # characters of a tool's input shown on its card


class _Malformed(Exception):
    """A line of the right syntax but the wrong shape (internal: counted, never raised out)."""


# What a hostile line can raise while being translated (pydantic's ValidationError is a
# ValueError): counted as malformed at the parser's boundary, never raised out.
_BAD_INPUT = (_Malformed, ValueError, TypeError, OverflowError, RecursionError)


def _loads(line: str) -> Any:
    """JSON of a line, or ``_Malformed``."""
    text = line.strip()
    if not text:
        raise _Malformed("empty")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _Malformed("not json") from exc


def _obj(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Malformed(f"{what} is not an object")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise _Malformed(f"{what} is not a string")
    return value


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _opt_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None  # json.loads accepts Infinity and NaN
    return int(value)


def _label(value: Any) -> str:
    """A skip-count key from wire data: bounded, so hostile input cannot grow the stats."""
    return value[:40] if isinstance(value, str) else type(value).__name__


def _short(text: str, limit: int = MAX_SUMMARY) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tool_name_of(tool_call_id: str) -> str:
    """Gemini prefixes a call id with the tool name: ``run_shell_command__run_shell_…_0``."""
    name, sep, _ = tool_call_id.partition("__")
    return name if sep and name else tool_call_id


def display_tool_name(name: str, mcp_servers: tuple[str, ...] = ()) -> str:
    """Gemini names MCP tools ``mcp_<server>_<tool>``; map the configured servers' tools to
    the common ``mcp__<server>__<tool>`` form before cleaning, so every CLI's MCP tool card
    reads the same (``Process Manager · Restart Process``)."""
    for server in sorted(mcp_servers, key=len, reverse=True):
        prefix = f"mcp_{server}_"
        if name.startswith(prefix) and len(name) > len(prefix):
            return clean_tool_name(f"mcp__{server}__{name[len(prefix) :]}")
    return clean_tool_name(name)


# --- per-turn: gemini -p -o stream-json ----------------------------------------------------


@dataclass
class StreamJsonParser:
    """One ``gemini -p -o stream-json`` process's stdout lines -> events."""

    mcp_servers: tuple[str, ...] = ()
    stats: ParserStats = field(default_factory=ParserStats)
    session_id: str | None = None
    model: str | None = None
    finished: bool = False  # a ``result`` line was seen: the turn ended normally

    def feed(self, line: str) -> list[AgentEvent]:
        self.stats.lines += 1
        try:
            events = self._parse(_loads(line))
        except _BAD_INPUT:
            self.stats.malformed += 1
            return []
        self.stats.events += len(events)
        return events

    def _parse(self, msg: Any) -> list[AgentEvent]:
        msg = _obj(msg, "line")
        kind = _str(msg.get("type"), "type")
        if kind == "init":
            self.session_id = _str(msg.get("session_id"), "session_id")
            self.model = _opt_str(msg.get("model"))
            return [SessionStarted(session_id=self.session_id, model=self.model)]
        if kind == "message":
            role = msg.get("role")
            content = _str(msg.get("content"), "content")
            if role == "assistant" and content:
                return [TextDelta(text=content)]
            self.stats.skip(f"message:{_label(role)}")
            return []
        if kind == "tool_use":
            tool_id = _str(msg.get("tool_id"), "tool_id")
            name = _str(msg.get("tool_name"), "tool_name")
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
            tool_id = _str(msg.get("tool_id"), "tool_id")
            status = msg.get("status")
            output = msg.get("output")
            error = msg.get("error")
            result = output if isinstance(output, str) else ""
            if not result and error is not None:
                result = _error_text(error)
            return [ToolFinished(tool_id=tool_id, result=result, is_error=status != "success")]
        if kind == "error":
            return [AgentError(message=_error_text(msg.get("message") or msg), retryable=False)]
        if kind == "result":
            self.finished = True
            return [self._result(msg)]
        self.stats.skip(_label(kind))
        return []

    def _result(self, msg: dict[str, Any]) -> TurnCompleted:
        raw_stats = msg.get("stats")
        stats: dict[str, Any] = raw_stats if isinstance(raw_stats, dict) else {}
        models = stats.get("models")
        model = self.model
        if isinstance(models, dict) and models:
            model = next(iter(models))
        usage = Usage(
            input_tokens=_opt_int(stats.get("input_tokens")),
            output_tokens=_opt_int(stats.get("output_tokens")),
            cache_read_tokens=_opt_int(stats.get("cached")),
        )
        ok = msg.get("status") == "success"
        return TurnCompleted(
            session_id=self.session_id,
            duration_ms=_opt_int(stats.get("duration_ms")),
            usage=usage,
            model=model,
            is_error=not ok,
            error=None if ok else _error_text(msg.get("error") or msg.get("status")),
        )


def _tool_input_summary(params: Any) -> str:
    if isinstance(params, dict):
        for key in ("command", "file_path", "path", "pattern", "url", "query"):
            if isinstance(params.get(key), str):
                return _short(params[key])
        try:
            return _short(json.dumps(params, ensure_ascii=False))
        except (TypeError, ValueError):
            return ""
    return ""


def _error_text(error: Any) -> str:
    if isinstance(error, str):
        return error
    if isinstance(error, dict):
        message = error.get("message")
        if isinstance(message, str):
            return message
    try:
        return json.dumps(error, ensure_ascii=False)[:500]
    except (TypeError, ValueError):
        return repr(error)[:500]


# --- long-lived: gemini --acp (JSON-RPC 2.0) ------------------------------------------------


@dataclass(frozen=True, slots=True)
class RpcResponse:
    """A response to one of the driver's requests (``error`` set when it failed)."""

    id: int | str
    result: Any = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RpcRequest:
    """A request from the agent the driver must answer (by ``id``)."""

    id: int | str
    method: str
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PendingPermission:
    """A ``session/request_permission`` waiting for the user: which option means yes/no."""

    rpc_id: int | str
    tool_id: str
    allow_option: str | None
    reject_option: str | None


@dataclass
class AcpRead:
    """What one ACP line meant: events to emit, plus protocol for the driver."""

    events: list[AgentEvent] = field(default_factory=list)
    response: RpcResponse | None = None  # a response the driver is waiting for
    request: RpcRequest | None = None  # an agent request the parser could not translate
    turn_ended: bool = False  # the prompt's response came: the turn is over
    commands_listed: bool = False  # ``available_commands_update``: the end of a load replay


@dataclass
class AcpParser:
    """``gemini --acp`` stdout lines -> events. The driver calls ``begin_turn(prompt_rpc_id)``
    when it sends ``session/prompt``; updates outside a turn (the history replayed by
    ``session/load``) are skipped."""

    mcp_servers: tuple[str, ...] = ()
    stats: ParserStats = field(default_factory=ParserStats)
    session_id: str | None = None
    prompt_id: int | str | None = None  # the in-flight ``session/prompt`` request id
    permissions: dict[str, PendingPermission] = field(default_factory=dict)
    _started: set[str] = field(default_factory=set)  # tool ids with a card this turn
    _asked: dict[str, dict[str, Any]] = field(default_factory=dict)  # tool id -> toolCall
    _block: int = 0
    _last_was_text: bool = False

    @property
    def in_turn(self) -> bool:
        return self.prompt_id is not None

    def begin_turn(self, prompt_id: int | str) -> None:
        self.prompt_id = prompt_id
        self._started.clear()
        self._asked.clear()
        self._block += 1
        self._last_was_text = False

    def end_turn(self) -> None:
        """The turn is over (its response came, or the process died): forget its requests."""
        self.prompt_id = None
        self.permissions.clear()

    def feed(self, line: str) -> AcpRead:
        self.stats.lines += 1
        try:
            read = self._parse(_loads(line))
        except _BAD_INPUT:
            self.stats.malformed += 1
            return AcpRead()
        self.stats.events += len(read.events)
        return read

    # dispatch -----------------------------------------------------------------------------
    def _parse(self, msg: Any) -> AcpRead:
        msg = _obj(msg, "message")
        if msg.get("jsonrpc") != "2.0":
            raise _Malformed("not json-rpc 2.0")
        method = msg.get("method")
        rpc_id = msg.get("id")
        if rpc_id is not None and (isinstance(rpc_id, bool) or not isinstance(rpc_id, int | str)):
            raise _Malformed("bad id")
        if method is None:
            if rpc_id is None:
                raise _Malformed("neither method nor id")
            return self._response(rpc_id, msg)
        method = _str(method, "method")
        params = _obj(msg.get("params", {}), "params")
        if rpc_id is not None:
            return self._agent_request(rpc_id, method, params)
        if method == "session/update":
            return AcpRead(events=self._update(params), commands_listed=_is_commands(params))
        self.stats.skip(f"notification:{_label(method)}")
        return AcpRead()

    def _response(self, rpc_id: int | str, msg: dict[str, Any]) -> AcpRead:
        error = msg.get("error")
        if error is not None:
            error = _obj(error, "error")
        elif "result" not in msg:
            raise _Malformed("response without result or error")
        response = RpcResponse(id=rpc_id, result=msg.get("result"), error=error)
        if self.prompt_id is None or rpc_id != self.prompt_id:
            self.stats.skip("rpc_response")
            return AcpRead(response=response)
        events = self._turn_end(response)
        self.end_turn()
        return AcpRead(events=events, response=response, turn_ended=True)

    def _turn_end(self, response: RpcResponse) -> list[AgentEvent]:
        if response.error is not None:
            message = _error_text(response.error)
            details = response.error.get("data")
            if isinstance(details, dict) and isinstance(details.get("details"), str):
                message = f"{message}: {details['details']}"
            return [TurnCompleted(session_id=self.session_id, is_error=True, error=message)]
        result = response.result if isinstance(response.result, dict) else {}
        reason = result.get("stopReason")
        if reason == "cancelled":
            return [TurnAborted(reason="interrupted")]
        usage, model = _quota(result.get("_meta"))
        if reason in ("end_turn", "max_tokens", "max_turn_requests", None):
            note = None if reason in ("end_turn", None) else f"stopped: {reason}"
            return [TurnCompleted(session_id=self.session_id, usage=usage, model=model, error=note)]
        # ``refusal`` or a reason newer than this adapter: the turn is over, not normally.
        return [
            TurnCompleted(
                session_id=self.session_id,
                usage=usage,
                model=model,
                is_error=True,
                error=f"stopped: {reason}",
            )
        ]

    def _agent_request(self, rpc_id: int | str, method: str, params: dict[str, Any]) -> AcpRead:
        request = RpcRequest(id=rpc_id, method=method, params=params)
        if method != "session/request_permission":
            # fs/* and terminal/* only come when the client advertises them; we do not.
            self.stats.skip(f"request:{_label(method)}")
            return AcpRead(request=request)
        tool_call = _obj(params.get("toolCall"), "toolCall")
        tool_id = _str(tool_call.get("toolCallId"), "toolCallId")
        options = params.get("options")
        if not isinstance(options, list):
            raise _Malformed("options is not a list")
        allow = _pick_option(options, ("allow_once", "allow_always"))
        reject = _pick_option(options, ("reject_once", "reject_always"))
        request_id = f"gemini-perm-{rpc_id}"
        self.permissions[request_id] = PendingPermission(rpc_id, tool_id, allow, reject)
        self._asked[tool_id] = tool_call
        name = tool_name_of(tool_id)
        title = tool_call.get("title") if isinstance(tool_call.get("title"), str) else ""
        detail = _short(title or _content_text(tool_call.get("content")), 500)
        event = PermissionRequested(
            request_id=request_id,
            tool=display_tool_name(name, self.mcp_servers),
            detail=detail,
        )
        return AcpRead(events=[event], request=request)

    # session/update -----------------------------------------------------------------------
    def _update(self, params: dict[str, Any]) -> list[AgentEvent]:
        update = _obj(params.get("update"), "update")
        kind = _str(update.get("sessionUpdate"), "sessionUpdate")
        session = params.get("sessionId")
        if self.session_id is not None and session is not None and session != self.session_id:
            self.stats.skip("other_session")
            return []
        if not self.in_turn:
            # The history ``session/load`` replays, or a late update of an ended turn.
            self.stats.skip(f"outside_turn:{_label(kind)}")
            return []
        if kind == "agent_message_chunk":
            text = _chunk_text(update)
            if not text:
                self.stats.skip("empty_chunk")
                return []
            self._last_was_text = True
            return [TextDelta(text=text, block=f"b{self._block}")]
        if kind == "agent_thought_chunk":
            text = _chunk_text(update)
            if not text:
                self.stats.skip("empty_chunk")
                return []
            # The CLI renders a thought as "**subject**\ndescription"; no subject leaves "****".
            text = text.removeprefix("****\n")
            if not text:
                self.stats.skip("empty_chunk")
                return []
            return [ThinkingDelta(text=text)]
        if kind == "tool_call":
            return self._tool_call(update)
        if kind == "tool_call_update":
            return self._tool_update(update)
        self.stats.skip(_label(kind))
        return []

    def _tool_started(self, tool_id: str, update: dict[str, Any]) -> ToolStarted:
        name = tool_name_of(tool_id)
        raw_title = update.get("title")
        title = raw_title if isinstance(raw_title, str) else ""
        self._started.add(tool_id)
        if self._last_was_text:
            self._block += 1  # text after a tool is a new message
            self._last_was_text = False
        return ToolStarted(
            tool_id=tool_id,
            name=name,
            display_name=display_tool_name(name, self.mcp_servers),
            input_summary=_short(title),
        )

    def _tool_call(self, update: dict[str, Any]) -> list[AgentEvent]:
        tool_id = _str(update.get("toolCallId"), "toolCallId")
        if tool_id in self._started:
            return self._tool_update(update)
        events: list[AgentEvent] = [self._tool_started(tool_id, update)]
        status = update.get("status")
        if status in ("completed", "failed"):
            events.append(self._tool_finished(tool_id, update, status))
        return events

    def _tool_update(self, update: dict[str, Any]) -> list[AgentEvent]:
        tool_id = _str(update.get("toolCallId"), "toolCallId")
        status = update.get("status")
        events: list[AgentEvent] = []
        if tool_id not in self._started:
            # After a permission answer the CLI sends no ``tool_call``, only this update:
            # the card starts now, from what the permission request said.
            asked = self._asked.get(tool_id, {})
            events.append(self._tool_started(tool_id, {**asked, **update}))
        if status in ("completed", "failed"):
            events.append(self._tool_finished(tool_id, update, status))
        elif not events:
            self.stats.skip(f"tool_call_update:{_label(status)}")
        return events

    def _tool_finished(self, tool_id: str, update: dict[str, Any], status: str) -> ToolFinished:
        return ToolFinished(
            tool_id=tool_id,
            result=_content_text(update.get("content")),
            is_error=status == "failed",
        )


def _pick_option(options: list[Any], kinds: tuple[str, ...]) -> str | None:
    """The first option of the most preferred kind (``allow_once`` before ``allow_always``)."""
    for kind in kinds:
        for option in options:
            if isinstance(option, dict) and option.get("kind") == kind:
                option_id = option.get("optionId")
                if isinstance(option_id, str):
                    return option_id
    return None


def _chunk_text(update: dict[str, Any]) -> str:
    content = update.get("content")
    if isinstance(content, dict) and content.get("type") == "text":
        text = content.get("text")
        if isinstance(text, str):
            return text
    if content is not None and not isinstance(content, dict):
        raise _Malformed("chunk content is not an object")
    return ""


def _content_text(content: Any) -> str:
    """Text of an ACP tool content list (``content`` blocks; diffs summarised)."""
    if not isinstance(content, list):
        return ""
    texts: list[str] = []
    for item in content:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "content":
            inner = item.get("content")
            if isinstance(inner, dict) and isinstance(inner.get("text"), str):
                texts.append(inner["text"])
        elif item.get("type") == "diff" and isinstance(item.get("path"), str):
            texts.append(f"edited {item['path']}")
    return "\n".join(texts)


def _is_commands(params: dict[str, Any]) -> bool:
    update = params.get("update")
    return isinstance(update, dict) and update.get("sessionUpdate") == "available_commands_update"


def _quota(meta: Any) -> tuple[Usage | None, str | None]:
    """Usage and model from the prompt result's ``_meta.quota``."""
    if not isinstance(meta, dict) or not isinstance(meta.get("quota"), dict):
        return None, None
    quota = meta["quota"]
    counts = quota.get("token_count") if isinstance(quota.get("token_count"), dict) else {}
    usage = Usage(
        input_tokens=_opt_int(counts.get("input_tokens")),
        output_tokens=_opt_int(counts.get("output_tokens")),
    )
    model = None
    models = quota.get("model_usage")
    if isinstance(models, list):
        for entry in models:
            if isinstance(entry, dict) and isinstance(entry.get("model"), str):
                model = entry["model"]
                break
    return usage, model

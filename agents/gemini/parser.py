"""``gemini --acp`` (ACP v1, JSON-RPC 2.0 over stdio) -> typed agent events: pure, one line
in, one ``ParsedLine`` out (``long-lived/REPORT.md`` section 2). The per-turn
``gemini -p -o stream-json`` lines are read by ``stream_parser.py``, with the helpers here.

``session/update`` notifications become deltas and tool events; ``session/request_permission``
(a request from the agent) becomes ``PermissionRequested``, pending until ``take_request``;
any other request from the agent is handed back to ``refuse``; the *response* to
``session/prompt`` is the end of the turn (``turn_ended``: ``stopReason``
``end_turn``/``cancelled``/``max_tokens``/...), and an error response to it is a failed turn.
Other responses are handed back (``response``) to the adapter's ``RpcPeer``, which matches
them to its requests by id. The command list that ends a ``session/load`` replay sets
``replay_ended``.

Invariants: nothing here raises on input. A line that is not JSON or has the wrong shape is
counted in ``stats.malformed``; a well-formed line with no common meaning (a command list, a
replayed history chunk, an update outside any turn) is counted in ``stats.skipped`` by kind.
The parser keeps only what it needs to translate (known tool ids, pending permission
options, the prompt request id); it does no I/O and reads no clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from threadspindle.agents.base.fields import (
    MalformedInput,
    as_int,
    cut,
    load_object,
    need_dict,
    need_str,
)
from threadspindle.agents.base.jsonrpc import RpcId, RpcRequest, RpcResponse, read_message
from threadspindle.agents.base.parsing import ParsedLine, ParserStats, clean_tool_name
from threadspindle.runtime.core.agent_events import (
    AgentEvent,
    PermissionRequested,
    TextDelta,
    ThinkingDelta,
    ToolFinished,
    ToolStarted,
    TurnAborted,
    TurnCompleted,
    Usage,
)

__all__ = [
    "MAX_SUMMARY",
    "AcpParser",
    "PendingPermission",
    "display_tool_name",
    "error_text",
    "tool_name_of",
]

MAX_SUMMARY = 200  # characters of a tool's input shown on its card

# The frequent events, built without validation from checked values: ``Frozen.builder``
# makes one in less than half of ``trusted``'s time.
_make_text_delta = TextDelta.builder("text", "block")
_make_thinking_delta = ThinkingDelta.builder("text")
_make_tool_started = ToolStarted.builder("tool_id", "name", "display_name", "input_summary")
_make_tool_finished = ToolFinished.builder("tool_id", "result", "is_error")

# What a hostile line can raise while being translated (pydantic's ValidationError is a
# ValueError): counted as malformed at the parser's boundary, never raised out.
BAD_INPUT = (MalformedInput, ValueError, TypeError, OverflowError, RecursionError)


def label(value: Any) -> str:
    """A skip-count key from wire data (``ParserStats`` bounds it)."""
    return value if isinstance(value, str) else type(value).__name__


def short(text: str, limit: int = MAX_SUMMARY) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    return cut(" ".join(text.split()), limit)


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


def error_text(error: Any) -> str:
    """An error (a string, ``{message}``, anything) as one readable string."""
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
class PendingPermission:
    """A ``session/request_permission`` waiting for the user: which option means yes/no."""

    rpc_id: RpcId
    tool_id: str
    allow_option: str | None
    reject_option: str | None


@dataclass
class AcpParser:
    """``gemini --acp`` stdout lines -> ``ParsedLine``. The adapter calls
    ``begin_turn(prompt_rpc_id)`` when it sends ``session/prompt``; updates outside a turn
    (the history replayed by ``session/load``) are skipped."""

    mcp_servers: tuple[str, ...] = ()
    stats: ParserStats = field(default_factory=ParserStats)
    session_id: str | None = None
    prompt_id: RpcId | None = None  # the in-flight ``session/prompt`` request id
    pending: dict[str, PendingPermission] = field(default_factory=dict)
    _started: set[str] = field(default_factory=set)  # tool ids with a card this turn
    _asked: dict[str, dict[str, Any]] = field(default_factory=dict)  # tool id -> toolCall
    _block: int = 0
    _last_was_text: bool = False

    @property
    def in_turn(self) -> bool:
        return self.prompt_id is not None

    def begin_turn(self, prompt_id: RpcId) -> None:
        self.prompt_id = prompt_id
        self._started.clear()
        self._asked.clear()
        self._block += 1
        self._last_was_text = False

    def end_turn(self) -> None:
        """The turn is over (its response came, or the process died): forget its requests."""
        self.prompt_id = None
        self.pending.clear()

    def take_request(self, request_id: str) -> PendingPermission | None:
        """The permission request an answer is for (once)."""
        return self.pending.pop(request_id, None)

    def take_all_requests(self) -> list[PendingPermission]:
        """Every pending permission request (a cancelled turn answers them all)."""
        pending = list(self.pending.values())
        self.pending.clear()
        return pending

    def feed(self, line: str) -> ParsedLine:
        """What one stdout line means. Never raises."""
        stats = self.stats
        stats.lines += 1
        try:
            out = self._parse(load_object(line))
        except BAD_INPUT:
            stats.malformed += 1
            return ParsedLine()
        stats.events += len(out.events)
        return out

    # dispatch -----------------------------------------------------------------------------
    def _parse(self, msg: dict[str, Any]) -> ParsedLine:
        if msg.get("jsonrpc") != "2.0":
            raise MalformedInput("not json-rpc 2.0")
        if msg.get("method") == "session/update" and msg.get("id") is None:
            # Nearly every line of a turn: the notification ``read_message`` would make, read
            # in place (the same checks: a string method, no id, params an object or absent).
            params = msg.get("params")
            if params is None:
                params = {}
            elif not isinstance(params, dict):
                raise MalformedInput("params is not an object")
            events = self._update(params)
            # Only the command list ends a replay, and it has no events.
            return ParsedLine(events, replay_ended=not events and _is_commands(params))
        message = read_message(msg)
        if isinstance(message, RpcResponse):
            return self._response(message)
        if isinstance(message, RpcRequest):
            return self._agent_request(message)
        self.stats.skip(f"notification:{label(message.method)}")
        return ParsedLine()

    def _response(self, response: RpcResponse) -> ParsedLine:
        if self.prompt_id is None or response.id != self.prompt_id:
            self.stats.skip("rpc_response")
            return ParsedLine(response=response)
        events = self._turn_end(response)
        self.end_turn()
        return ParsedLine(events, response=response, turn_ended=True)

    def _turn_end(self, response: RpcResponse) -> list[AgentEvent]:
        if response.error is not None:
            message = error_text(response.error)
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

    def _agent_request(self, request: RpcRequest) -> ParsedLine:
        if request.method != "session/request_permission":
            # fs/* and terminal/* only come when the client advertises them; we do not.
            self.stats.skip(f"request:{label(request.method)}")
            return ParsedLine(refuse=request)
        params = request.params
        tool_call = need_dict(params.get("toolCall"), "toolCall")
        tool_id = need_str(tool_call.get("toolCallId"), "toolCallId")
        options = params.get("options")
        if not isinstance(options, list):
            raise MalformedInput("options is not a list")
        allow = _pick_option(options, ("allow_once", "allow_always"))
        reject = _pick_option(options, ("reject_once", "reject_always"))
        request_id = f"gemini-perm-{request.id}"
        self.pending[request_id] = PendingPermission(request.id, tool_id, allow, reject)
        self._asked[tool_id] = tool_call
        name = tool_name_of(tool_id)
        title = tool_call.get("title") if isinstance(tool_call.get("title"), str) else ""
        detail = short(title or _content_text(tool_call.get("content")), 500)
        event = PermissionRequested(
            request_id=request_id,
            tool=display_tool_name(name, self.mcp_servers),
            detail=detail,
        )
        return ParsedLine([event])

    # session/update -----------------------------------------------------------------------
    def _update(self, params: dict[str, Any]) -> list[AgentEvent]:
        update = need_dict(params.get("update"), "update")
        kind = need_str(update.get("sessionUpdate"), "sessionUpdate")
        session = params.get("sessionId")
        if self.session_id is not None and session is not None and session != self.session_id:
            self.stats.skip("other_session")
            return []
        if self.prompt_id is None:  # (not in_turn)
            # The history ``session/load`` replays, or a late update of an ended turn.
            self.stats.skip(f"outside_turn:{label(kind)}")
            return []
        if kind == "agent_message_chunk":
            text = _chunk_text(update)
            if not text:
                self.stats.skip("empty_chunk")
                return []
            self._last_was_text = True
            # The frequent events are built without validation (``Frozen.builder``): every
            # value is a str already (``_chunk_text``, ``need_str``, the helpers' results).
            return [_make_text_delta(text, f"b{self._block}")]
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
            return [_make_thinking_delta(text)]
        if kind == "tool_call":
            return self._tool_call(update)
        if kind == "tool_call_update":
            return self._tool_update(update)
        self.stats.skip(label(kind))
        return []

    def _tool_started(self, tool_id: str, update: dict[str, Any]) -> ToolStarted:
        name = tool_name_of(tool_id)
        raw_title = update.get("title")
        title = raw_title if isinstance(raw_title, str) else ""
        self._started.add(tool_id)
        if self._last_was_text:
            self._block += 1  # text after a tool is a new message
            self._last_was_text = False
        return _make_tool_started(
            tool_id, name, display_tool_name(name, self.mcp_servers), short(title)
        )

    def _tool_call(self, update: dict[str, Any]) -> list[AgentEvent]:
        tool_id = need_str(update.get("toolCallId"), "toolCallId")
        if tool_id in self._started:
            return self._tool_update(update)
        events: list[AgentEvent] = [self._tool_started(tool_id, update)]
        status = update.get("status")
        if status in ("completed", "failed"):
            events.append(self._tool_finished(tool_id, update, status))
        return events

    def _tool_update(self, update: dict[str, Any]) -> list[AgentEvent]:
        tool_id = need_str(update.get("toolCallId"), "toolCallId")
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
            self.stats.skip(f"tool_call_update:{label(status)}")
        return events

    def _tool_finished(self, tool_id: str, update: dict[str, Any], status: str) -> ToolFinished:
        return _make_tool_finished(
            tool_id, _content_text(update.get("content")), status == "failed"
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
        raise MalformedInput("chunk content is not an object")
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
        input_tokens=as_int(counts.get("input_tokens"), floats=True),
        output_tokens=as_int(counts.get("output_tokens"), floats=True),
    )
    model = None
    models = quota.get("model_usage")
    if isinstance(models, list):
        for entry in models:
            if isinstance(entry, dict) and isinstance(entry.get("model"), str):
                model = entry["model"]
                break
    return usage, model

"""Claude Code's stream-json output, one line at a time, to typed agent events.

Sans-IO: ``ClaudeStreamParser.feed(line)`` returns the ``ParsedLine`` the line means and never
raises: the events for the thread; a ``control_response`` (the CLI's answer to one of our
control requests) as its ``response``; a control request only the host could serve (hooks,
SDK MCP) as ``refuse``, so the adapter refuses it at once; ``turn_ended`` at ``result``. It
keeps only the state the stream needs to be read correctly:

- which assistant messages already streamed their text/thinking as ``stream_event``
  deltas (``--include-partial-messages``), so the whole-block ``assistant`` line that
  follows is not emitted twice (without partial messages that line is the only text);
- which tool calls were already announced (a tool id starts once);
- the ``control_request`` s the CLI is waiting on (``can_use_tool``), by request id, so the
  adapter can answer them with the tool's original input (``take_request``).

Mapping (CLI 2.1.197, see ``docs/agents.md``): ``system/init`` -> ``SessionStarted``;
``stream_event`` text/thinking deltas -> ``TextDelta`` / ``ThinkingDelta``; ``assistant``
``tool_use`` -> ``ToolStarted``; ``user`` ``tool_result`` -> ``ToolFinished``;
``control_request can_use_tool`` -> ``PermissionRequested`` (``QuestionAsked`` for the
``AskUserQuestion`` tool); ``system/api_retry`` -> retryable ``AgentError``; ``result`` ->
``TurnCompleted`` (``TurnAborted`` when the CLI says the turn was aborted);
``control_cancel_request`` withdraws a pending request. Everything else
is counted as skipped; a line that is not a JSON object of the expected shape is counted as
malformed. ``is_unknown_session(text)`` recognises the start-up error of a ``--resume`` the
CLI cannot honour (the adapter then starts a new session).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from threadspindle.agents.base.fields import (
    MalformedInput,
    as_int,
    cut,
    load_object,
    need_dict,
    need_list,
    need_str,
)
from threadspindle.agents.base.jsonrpc import RpcRequest, RpcResponse
from threadspindle.agents.base.parsing import ParsedLine, ParserStats, clean_tool_name
from threadspindle.runtime.core.agent_events import (
    AgentError,
    AgentEvent,
    PermissionRequested,
    QuestionAsked,
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
    "ASK_USER_QUESTION",
    "ClaudeStreamParser",
    "PendingControl",
    "is_unknown_session",
    "summarize_tool_input",
]

ASK_USER_QUESTION = "AskUserQuestion"
SYNTHETIC_MODEL = "<synthetic>"
MAX_RESULT_CHARS = 4000  # a tool result is a card in a chat thread, not a log file
MAX_SUMMARY_CHARS = 300

# The events built for nearly every line, with checked values: ``Frozen.builder`` makes an
# instance in less than half of ``trusted``'s time (``trusted`` was a tenth of the parse).
_make_session_started = SessionStarted.builder("session_id", "model")
_make_text_delta = TextDelta.builder("text", "block")
_make_thinking_delta = ThinkingDelta.builder("text")
_make_tool_started = ToolStarted.builder("tool_id", "name", "display_name", "input_summary")
_make_tool_finished = ToolFinished.builder("tool_id", "result", "is_error")
_make_turn_aborted = TurnAborted.builder("reason")
_make_turn_completed = TurnCompleted.builder(
    "session_id", "cost_usd", "duration_ms", "usage", "model", "is_error", "error"
)
_make_usage = Usage.builder(
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "context_window"
)


@dataclass(frozen=True, slots=True)
class PendingControl:
    """A ``can_use_tool`` request the CLI is blocked on until the host answers."""

    request_id: str
    tool_name: str
    input: dict[str, Any]


# What Claude Code 2.1.197 says (stderr, and the `errors` of its start-up `result`) when it
# exits at start because `--resume` names a session it does not have: a UUID with no
# transcript in this project, or a value that is neither a UUID nor a session title.
_UNKNOWN_SESSION = re.compile(
    r"No conversation found with session ID"
    r"|--resume requires a valid session ID or session title"
)


def is_unknown_session(text: str) -> bool:
    """True when the CLI's start-up error says the session to resume does not exist."""
    return _UNKNOWN_SESSION.search(text) is not None


def summarize_tool_input(name: str, tool_input: dict[str, Any]) -> str:
    """One line saying what a tool call does: the command, the path, the pattern ..."""
    for key in ("command", "file_path", "path", "pattern", "url", "query", "description"):
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            return cut(value.replace("\n", " "), MAX_SUMMARY_CHARS)
    if not tool_input:
        return ""
    try:
        text = json.dumps(tool_input, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return ""
    return cut(text, MAX_SUMMARY_CHARS)


def _tool_result_text(content: Any) -> str:
    """A tool_result's content is a string or a list of parts (text, image ...)."""
    if isinstance(content, str):
        return cut(content, MAX_RESULT_CHARS)
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, dict):
                if part.get("type") == "text" and isinstance(part.get("text"), str):
                    parts.append(part["text"])
                elif isinstance(part.get("type"), str):
                    parts.append(f"[{part['type']}]")
        return cut("\n".join(parts), MAX_RESULT_CHARS)
    return ""


def _question_from_input(tool_input: dict[str, Any]) -> tuple[str, tuple[str, ...], bool]:
    """``AskUserQuestion`` input: ``{"questions": [{"question", "header", "options":
    [{"label", "description"}], "multiSelect"}]}``. Several questions are shown as one."""
    questions = tool_input.get("questions")
    if not isinstance(questions, list) or not questions:
        text = tool_input.get("question")
        return (text if isinstance(text, str) else "The agent has a question."), (), False
    texts: list[str] = []
    options: list[str] = []
    multiple = False
    for q in questions:
        if not isinstance(q, dict):
            continue
        if isinstance(q.get("question"), str):
            texts.append(q["question"])
        if q.get("multiSelect") is True:
            multiple = True
        for opt in q.get("options") or ():
            if isinstance(opt, dict) and isinstance(opt.get("label"), str):
                options.append(opt["label"])
            elif isinstance(opt, str):
                options.append(opt)
    question = "\n".join(texts) or "The agent has a question."
    return question, tuple(dict.fromkeys(options)), multiple


class ClaudeStreamParser:
    """Stateful reader of one Claude Code stdout stream (see the module docstring).

    The frequent events (deltas, tool cards, turn ends) are built without validation
    (``Frozen.builder``): every value has already been checked field by field (``need_str``,
    ``as_int``, ``isinstance``), and pydantic validating it a second time was a tenth of the
    parse.
    """

    def __init__(self) -> None:
        self.stats = ParserStats()
        self.session_id: str | None = None
        self.model: str | None = None
        self.pending: dict[str, PendingControl] = {}
        self._streamed_messages: set[str] = set()
        self._current_message: str | None = None
        self._started_tools: set[str] = set()
        self._cost_reported = 0.0  # total_cost_usd is cumulative over one process's turns

    # public --------------------------------------------------------------------------------
    def feed(self, line: str) -> ParsedLine:
        """What one stdout line means. Never raises."""
        stats = self.stats
        stats.lines += 1
        out = ParsedLine()
        if not line or line.isspace():  # (not strip(): that copies every line)
            stats.skip("blank")
            return out
        # This runs for every line: the dispatch is inlined, and its table is the class's
        # (a table of bound methods made per parser cost more than it saved on the short
        # processes of a per-turn CLI).
        try:
            obj = load_object(line)
            kind = obj.get("type")
            if not isinstance(kind, str):
                raise MalformedInput("type is not a string")
            session = obj.get("session_id")
            if isinstance(session, str) and session:
                self.session_id = session
            handler = _HANDLERS.get(kind)
            if handler is None:
                stats.skip(kind)
                return out
            events = handler(self, obj, out)
        except (ValueError, MalformedInput, TypeError, KeyError, AttributeError, RecursionError):
            # ValueError covers pydantic's ValidationError.
            stats.malformed += 1
            return ParsedLine()
        out.events = events
        stats.events += len(events)
        return out

    def take_request(self, request_id: str) -> PendingControl | None:
        """The ``can_use_tool`` request an answer is for (once: a second answer finds
        nothing, nor does one for a request the CLI withdrew or a turn that is over)."""
        return self.pending.pop(request_id, None)

    def process_started(self) -> None:
        """A new CLI process: its cost counter starts from zero again."""
        self._cost_reported = 0.0
        self._current_message = None

    # one handler per line type (``_HANDLERS``) ---------------------------------------------
    def _system(self, obj: dict[str, Any], out: ParsedLine) -> list[AgentEvent]:
        subtype = need_str(obj.get("subtype"), "subtype")
        if subtype == "init":
            session = need_str(obj.get("session_id"), "session_id")
            model = obj.get("model")
            self.model = model if isinstance(model, str) else self.model
            # One in five lines of a short turn: checked above, built without validation.
            return [_make_session_started(session, self.model)]
        if subtype == "api_retry":
            attempt = obj.get("attempt")
            most = obj.get("max_retries")
            error = obj.get("error")
            status = obj.get("error_status")
            what = f"API request failed ({error if isinstance(error, str) else 'error'}"
            what += f", HTTP {status})" if isinstance(status, int) else ")"
            return [
                AgentError(
                    message=what,
                    retryable=True,
                    attempt=as_int(attempt),
                    max_retries=as_int(most),
                )
            ]
        self.stats.skip(f"system/{subtype}")
        return []

    def _stream_event(self, obj: dict[str, Any], out: ParsedLine) -> list[AgentEvent]:
        # The hot path of a streamed answer (one line per delta): the checks of need_dict
        # and need_str are written out (their four calls were near a tenth of a delta).
        event = obj.get("event")
        if not isinstance(event, dict):
            raise MalformedInput("event is not an object")
        etype = event.get("type")
        if not isinstance(etype, str):
            raise MalformedInput("event.type is not a string")
        if etype == "content_block_delta":
            delta = event.get("delta")
            if not isinstance(delta, dict):
                raise MalformedInput("delta is not an object")
            dtype = delta.get("type")
            if not isinstance(dtype, str):
                raise MalformedInput("delta.type is not a string")
            if dtype == "text_delta":
                text = delta.get("text")
                if not isinstance(text, str):
                    raise MalformedInput("text is not a string")
                current = self._current_message
                if current is not None:
                    self._streamed_messages.add(current)
                if not text:
                    return []
                index = event.get("index")
                block = f"{current or 'msg'}:{index if isinstance(index, int) else 0}"
                # Checked above: the hot path skips a second validation.
                return [_make_text_delta(text, block)]
            if dtype == "thinking_delta":
                text = need_str(delta.get("thinking"), "thinking")
                current = self._current_message
                if current is not None:
                    self._streamed_messages.add(current)
                return [_make_thinking_delta(text)] if text else []
            self.stats.skip(f"stream_event/{dtype}")
            return []
        if etype == "message_start":
            message = need_dict(event.get("message"), "message")
            msg_id = message.get("id")
            self._current_message = msg_id if isinstance(msg_id, str) else None
            self.stats.skip("stream_event/message_start")
            return []
        self.stats.skip(f"stream_event/{etype}")
        return []

    def _assistant(self, obj: dict[str, Any], out: ParsedLine) -> list[AgentEvent]:
        message = need_dict(obj.get("message"), "message")
        content = need_list(message.get("content"), "content")
        msg_id = message.get("id")
        streamed = isinstance(msg_id, str) and msg_id in self._streamed_messages
        model = message.get("model")
        if model == SYNTHETIC_MODEL:
            # The CLI's own stand-in for a failed request ("API Error: ..."): the same text
            # comes as the error of the turn's `result`, which is where it belongs.
            self.stats.skip("assistant/synthetic")
            return []
        if isinstance(model, str):
            self.model = self.model or model
        events: list[AgentEvent] = []
        for index, part in enumerate(content):
            part = need_dict(part, "content part")
            ptype = need_str(part.get("type"), "part.type")
            if ptype == "text" and not streamed:
                text = need_str(part.get("text"), "text")
                if text:
                    events.append(_make_text_delta(text, f"{msg_id or 'msg'}:{index}"))
            elif ptype == "thinking" and not streamed:
                thought = part.get("thinking")
                if isinstance(thought, str) and thought:
                    events.append(_make_thinking_delta(thought))
            elif ptype == "tool_use":
                tool_id = need_str(part.get("id"), "tool id")
                if tool_id in self._started_tools:
                    continue
                self._started_tools.add(tool_id)
                name = need_str(part.get("name"), "tool name")
                tool_input = part.get("input")
                summary = summarize_tool_input(
                    name, tool_input if isinstance(tool_input, dict) else {}
                )
                events.append(_make_tool_started(tool_id, name, clean_tool_name(name), summary))
        if not events:
            self.stats.skip("assistant/already-streamed")
        return events

    def _user(self, obj: dict[str, Any], out: ParsedLine) -> list[AgentEvent]:
        message = need_dict(obj.get("message"), "message")
        content = message.get("content")
        if isinstance(content, str):
            self.stats.skip("user/text")  # an echo of a prompt or "[Request interrupted ...]"
            return []
        events: list[AgentEvent] = []
        for part in need_list(content, "content"):
            part = need_dict(part, "content part")
            if part.get("type") != "tool_result":
                continue
            tool_id = need_str(part.get("tool_use_id"), "tool_use_id")
            events.append(
                _make_tool_finished(
                    tool_id, _tool_result_text(part.get("content")), part.get("is_error") is True
                )
            )
        if not events:
            self.stats.skip("user/text")
        return events

    def _result(self, obj: dict[str, Any], out: ParsedLine) -> list[AgentEvent]:
        out.turn_ended = True
        self._streamed_messages.clear()  # message ids never repeat across turns
        self.pending.clear()  # the CLI waits on nothing once its turn is over
        self._started_tools.clear()
        subtype = obj.get("subtype")
        terminal = obj.get("terminal_reason")
        is_error = obj.get("is_error") is True
        session = obj.get("session_id")
        session_id = session if isinstance(session, str) else self.session_id
        total = obj.get("total_cost_usd")
        cost: float | None = None
        if isinstance(total, int | float) and not isinstance(total, bool):
            # The CLI reports the process's running total; a footer wants this turn's share.
            cost = max(0.0, round(float(total) - self._cost_reported, 9))
            self._cost_reported = float(total)
        if isinstance(terminal, str) and terminal.startswith("aborted"):
            return [_make_turn_aborted("interrupted")]
        model = self.model
        usage = self._usage(obj)
        model_usage = obj.get("modelUsage")
        if isinstance(model_usage, dict) and model_usage:
            first = next(iter(model_usage))
            model = first if isinstance(first, str) else model
        error: str | None = None
        if is_error:
            text = obj.get("result")
            errors = obj.get("errors")
            if isinstance(text, str) and text:
                error = text
            elif isinstance(errors, list) and errors:
                error = "; ".join(str(e) for e in errors)
            else:
                error = str(subtype or "error")
        duration_ms = as_int(obj.get("duration_ms"), floats=True)
        return [_make_turn_completed(session_id, cost, duration_ms, usage, model, is_error, error)]

    def _usage(self, obj: dict[str, Any]) -> Usage | None:
        usage = obj.get("usage")
        if not isinstance(usage, dict):
            return None
        window: int | None = None
        model_usage = obj.get("modelUsage")
        if isinstance(model_usage, dict):
            for entry in model_usage.values():
                if isinstance(entry, dict):
                    window = as_int(entry.get("contextWindow"), floats=True) or window
        return _make_usage(
            as_int(usage.get("input_tokens"), floats=True),
            as_int(usage.get("output_tokens"), floats=True),
            as_int(usage.get("cache_read_input_tokens"), floats=True),
            as_int(usage.get("cache_creation_input_tokens"), floats=True),
            window,
        )

    def _control_request(self, obj: dict[str, Any], out: ParsedLine) -> list[AgentEvent]:
        request_id = need_str(obj.get("request_id"), "request_id")
        request = need_dict(obj.get("request"), "request")
        subtype = need_str(request.get("subtype"), "request.subtype")
        if subtype != "can_use_tool":
            # The adapter answers these with an error at once so the CLI never waits.
            out.refuse = RpcRequest(request_id, subtype, request)
            self.stats.skip(f"control_request/{subtype}")
            return []
        tool_name = need_str(request.get("tool_name"), "tool_name")
        raw_input = request.get("input")
        tool_input = raw_input if isinstance(raw_input, dict) else {}
        self.pending[request_id] = PendingControl(request_id, tool_name, tool_input)
        if tool_name == ASK_USER_QUESTION:
            question, options, multiple = _question_from_input(tool_input)
            return [
                QuestionAsked(
                    request_id=request_id, question=question, options=options, multiple=multiple
                )
            ]
        display = request.get("display_name")
        # The CLI's display name of an MCP tool drops its server ("List Processes"); ours
        # keeps it, as on the tool card.
        if tool_name.startswith("mcp__") or not isinstance(display, str) or not display:
            shown = clean_tool_name(tool_name)
        else:
            shown = display
        detail = summarize_tool_input(tool_name, tool_input)
        reason = request.get("decision_reason") or request.get("description")
        if isinstance(reason, str) and reason and reason not in detail:
            detail = f"{detail} ({reason})" if detail else reason
        return [
            PermissionRequested(
                request_id=request_id,
                tool=shown,
                detail=detail,
            )
        ]

    def _control_cancel(self, obj: dict[str, Any], out: ParsedLine) -> list[AgentEvent]:
        # The CLI withdrew a request (an interrupt while it waited): nothing to answer now.
        self.pending.pop(need_str(obj.get("request_id"), "request_id"), None)
        self.stats.skip("control_cancel_request")
        return []

    def _control_response(self, obj: dict[str, Any], out: ParsedLine) -> list[AgentEvent]:
        response = need_dict(obj.get("response"), "response")
        request_id = response.get("request_id")
        if isinstance(request_id, str):  # an ack of one of our requests
            error = response.get("error") if response.get("subtype") == "error" else None
            out.response = RpcResponse(
                request_id,
                response.get("response"),
                {"message": str(error)} if error is not None else None,
            )
        self.stats.skip("control_response")
        return []


# What each line type means; any other type is counted as skipped.
_HANDLERS: dict[str, Callable[[ClaudeStreamParser, dict[str, Any], ParsedLine], list[AgentEvent]]]
_HANDLERS = {
    "stream_event": ClaudeStreamParser._stream_event,
    "assistant": ClaudeStreamParser._assistant,
    "user": ClaudeStreamParser._user,
    "system": ClaudeStreamParser._system,
    "result": ClaudeStreamParser._result,
    "control_request": ClaudeStreamParser._control_request,
    "control_response": ClaudeStreamParser._control_response,
    "control_cancel_request": ClaudeStreamParser._control_cancel,
}

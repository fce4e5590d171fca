"""Codex wire formats -> typed agent events: `codex app-server` JSON-RPC, `codex exec --json`.

Both parsers are pure (no I/O, no clock): one stdout line in, typed events out. A line that
is not JSON, has the wrong shape or wrong types is counted as malformed and skipped; a
well-formed message with no common meaning (rate limits, status changes, warnings ...) is
counted as skipped, by method. Nothing here raises on input.

This module holds the app-server parser, and what both parsers share (the limits, the shell
wrapper clean-up); ``ExecParser`` lives in ``exec_parser.py``. Every line gives a
``ParsedLine`` whose ``turn_id`` is the codex turn its events belong to.

The app-server parser also keeps what the adapter needs to answer the server's requests:
each approval or question the agent asks gets a ``request_id`` unique to this process
(``"<prefix>:<json-rpc id>"``) and stays pending until ``take_request`` hands it out with
the JSON-RPC id and the result that answers it.

Mapping (app-server, 0.169.0; ``long-lived/REPORT.md`` section 1):

* ``item/agentMessage/delta`` -> ``TextDelta`` (block = item id); an ``agentMessage`` that
  completes without deltas (or with more text than streamed) gives the rest as one delta.
* ``item/reasoning/textDelta`` / ``summaryTextDelta`` -> ``ThinkingDelta``.
* ``item/started`` / ``item/completed`` of ``commandExecution``, ``fileChange``,
  ``mcpToolCall``, ``dynamicToolCall``, ``webSearch``, ``imageView``, ``collabAgentToolCall``
  -> ``ToolStarted`` / ``ToolFinished``.
* server requests ``item/commandExecution/requestApproval``, ``item/fileChange/requestApproval``,
  ``item/permissions/requestApproval``, ``execCommandApproval``, ``applyPatchApproval``,
  ``mcpServer/elicitation/request`` -> ``PermissionRequested``; ``item/tool/requestUserInput``
  -> ``QuestionAsked``.
* ``turn/completed``: ``completed`` -> ``TurnCompleted`` (usage from the thread's token totals
  during the turn), ``failed`` -> ``TurnCompleted(is_error)``, ``interrupted`` ->
  ``TurnAborted("interrupted")``.
* ``error`` -> ``AgentError`` (``retryable`` = the CLI's ``willRetry``); an MCP server whose
  start-up failed (``mcpServer/startupStatus/updated``) -> ``AgentError``.
* ``thread/started`` is skipped: the adapter reports the session from the ``thread/start``
  or ``thread/resume`` response, which also names the model.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from threadspindle.agents.base.fields import (
    MalformedInput,
    as_dict,
    as_int,
    as_list,
    as_str,
    cut,
    load_object,
)
from threadspindle.agents.base.jsonrpc import (
    RpcRequest,
    RpcResponse,
    read_message,
)
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
    "MAX_RESULT_CHARS",
    "MAX_SUMMARY_CHARS",
    "AppServerParser",
    "PendingRequest",
    "shell_command_summary",
]

MAX_RESULT_CHARS = 100_000  # a tool result longer than this is cut: the chat shows a tail anyway
MAX_SUMMARY_CHARS = 500

# The frequent events, built without validation from values checked here (``as_str``,
# ``cut``, bools): ``Frozen.builder`` makes one in a fraction of validation's time.
_make_text_delta = TextDelta.builder("text", "block")
_make_thinking_delta = ThinkingDelta.builder("text")
_make_tool_started = ToolStarted.builder("tool_id", "name", "display_name", "input_summary")
_make_tool_finished = ToolFinished.builder("tool_id", "result", "is_error")

_BASH_WRAPPER = re.compile(r"^/bin/(?:ba|z)?sh -lc '(.*)'$", re.DOTALL)


def shell_command_summary(command: str) -> str:
    """``/bin/bash -lc 'echo hi'`` -> ``echo hi`` (the wrapper says nothing to a reader)."""
    m = _BASH_WRAPPER.match(command.strip())
    return m.group(1) if m else command


@dataclass(frozen=True, slots=True)
class PendingRequest:
    """An approval or question waiting for the thread's answer."""

    rpc_id: int | str
    method: str
    kind: str  # "permission" | "question"
    params: dict[str, Any]


_PERMISSION_METHODS = {
    "item/commandExecution/requestApproval": "Shell",
    "item/fileChange/requestApproval": "Edit",
    "item/permissions/requestApproval": "Permissions",
    "execCommandApproval": "Shell",
    "applyPatchApproval": "Edit",
    "mcpServer/elicitation/request": "MCP",
}
_QUESTION_METHODS = {"item/tool/requestUserInput"}


def _usage_numbers(raw: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for key in ("inputTokens", "cachedInputTokens", "cacheWriteInputTokens", "outputTokens"):
        n = as_int(raw.get(key))
        if n is not None:
            out[key] = n
    return out


class AppServerParser:
    """``codex app-server`` stdout (JSON-RPC 2.0, one message a line) -> ``ParsedLine``."""

    def __init__(self, request_prefix: str = "codex") -> None:
        self.stats = ParserStats()
        self.request_prefix = request_prefix
        self.model: str | None = None  # set by the adapter from thread/start|resume
        self.context_window: int | None = None
        self.pending: dict[str, PendingRequest] = {}
        # item id -> the deltas streamed so far, joined only at completion (appending to a
        # string would copy it on every delta: quadratic on long answers)
        self._streamed: dict[str, list[str]] = {}
        self._file_changes: dict[str, str] = {}  # item id -> paths, for approval details
        self._last_total: dict[str, int] = {}  # thread token totals, last seen
        self._turn_usage: dict[str, dict[str, int]] = {}  # turn id -> tokens used in it
        self._held_errors: dict[str, str] = {}  # turn id -> its final error, not yet told

    # entry point -----------------------------------------------------------------------
    def feed(self, line: str) -> ParsedLine:
        """What one stdout line means. Never raises."""
        self.stats.lines += 1
        out = ParsedLine()
        if not line or line.isspace():
            self.stats.skip("blank")
            return out
        try:
            msg = load_object(line)
            method = msg.get("method")
            if isinstance(method, str) and msg.get("id") is None:
                # A notification, most lines: read in place, with ``read_message``'s checks
                # (a string method, no id, params an object or absent), and no message object.
                params = msg.get("params")
                if params is None:
                    params = {}
                elif not isinstance(params, dict):
                    raise MalformedInput("params is not an object")
                self._notification(method, params, out)
            else:
                message = read_message(msg)
                if isinstance(message, RpcResponse):
                    out.response = message
                elif isinstance(message, RpcRequest):
                    self._server_request(message, out)
                else:
                    self._notification(message.method, message.params, out)
        except Exception:  # a shape we did not foresee must not end the thread's agent
            self.stats.malformed += 1
            return ParsedLine()
        self.stats.events += len(out.events)
        return out

    # server -> client requests -----------------------------------------------------------
    def request_id_for(self, rpc_id: int | str) -> str:
        return f"{self.request_prefix}:{rpc_id}"

    def take_request(self, request_id: str) -> PendingRequest | None:
        """The pending request for an answer (once: a second answer finds nothing)."""
        return self.pending.pop(request_id, None)

    def pending_requests(self) -> list[str]:
        return list(self.pending)

    def forget_turn_requests(self, turn_id: str) -> list[str]:
        """Drop requests of a finished turn (codex resolved them itself); their ids."""
        gone = [rid for rid, p in self.pending.items() if p.params.get("turnId") == turn_id]
        for rid in gone:
            del self.pending[rid]
        return gone

    def _server_request(self, request: RpcRequest, out: ParsedLine) -> None:
        rpc_id, method, params = request.id, request.method, request.params
        out.turn_id = as_str(params.get("turnId"))
        request_id = self.request_id_for(rpc_id)
        if method in _PERMISSION_METHODS:
            event = PermissionRequested(
                request_id=request_id,
                tool=_PERMISSION_METHODS[method],
                detail=self._permission_detail(method, params),
            )
            self.pending[request_id] = PendingRequest(rpc_id, method, "permission", params)
            out.events.append(event)
            return
        if method in _QUESTION_METHODS:
            questions = [as_dict(q) for q in as_list(params.get("questions"))]
            if not questions:
                self.stats.malformed += 1
                out.refuse = request
                return
            first = questions[0]
            text = "\n\n".join(
                " — ".join(s for s in (as_str(q.get("header")), as_str(q.get("question"))) if s)
                for q in questions
            )
            options = tuple(
                label
                for o in as_list(first.get("options"))
                if (label := as_str(as_dict(o).get("label"))) is not None
            )
            question = QuestionAsked(request_id=request_id, question=text, options=options)
            self.pending[request_id] = PendingRequest(rpc_id, method, "question", params)
            out.events.append(question)
            return
        self.stats.skip(f"request:{method}")
        out.refuse = request  # nobody in a thread can answer it

    def _permission_detail(self, method: str, params: dict[str, Any]) -> str:
        reason = as_str(params.get("reason"))
        if method in ("item/commandExecution/requestApproval", "execCommandApproval"):
            command = params.get("command")
            if isinstance(command, list):
                command = " ".join(str(c) for c in command)
            text = shell_command_summary(command) if isinstance(command, str) else ""
            cwd = as_str(params.get("cwd"))
            detail = text + (f"\n(in {cwd})" if cwd else "")
        elif method == "item/fileChange/requestApproval":
            item = as_str(params.get("itemId")) or ""
            detail = self._file_changes.get(item, "") or as_str(params.get("grantRoot")) or ""
        elif method == "applyPatchApproval":
            detail = "\n".join(str(k) for k in as_dict(params.get("fileChanges")))
        elif method == "mcpServer/elicitation/request":
            server = as_str(params.get("serverName")) or "MCP server"
            detail = f"{server}: {as_str(params.get('message')) or ''}"
        else:
            detail = json.dumps(params.get("permissions"), default=str)
        if reason:
            detail = f"{detail}\n{reason}" if detail else reason
        return cut(detail, 2000)

    @staticmethod
    def permission_result(pending: PendingRequest, allow: bool) -> dict[str, Any]:
        """The JSON-RPC result that answers an approval. Deny is ``decline``: the command
        does not run and the model carries on (``cancel`` would end the turn)."""
        if pending.method in ("execCommandApproval", "applyPatchApproval"):
            return {"decision": "approved" if allow else "denied"}
        if pending.method == "item/permissions/requestApproval":
            granted = as_dict(pending.params.get("permissions")) if allow else {}
            return {"permissions": granted, "scope": "turn"}
        if pending.method == "mcpServer/elicitation/request":
            return {"action": "accept", "content": {}} if allow else {"action": "decline"}
        return {"decision": "accept" if allow else "decline"}

    @staticmethod
    def question_result(pending: PendingRequest, answer: str | None) -> dict[str, Any]:
        answers: dict[str, Any] = {}
        for q in as_list(pending.params.get("questions")):
            qid = as_str(as_dict(q).get("id"))
            if qid is not None:
                answers[qid] = {"answers": [answer] if answer is not None else []}
        return {"answers": answers}

    # notifications ---------------------------------------------------------------------
    def _notification(self, method: str, params: dict[str, Any], out: ParsedLine) -> None:
        turn_id = out.turn_id = as_str(params.get("turnId"))
        if method == "item/agentMessage/delta":
            delta, item = as_str(params.get("delta")), as_str(params.get("itemId"))
            if delta is None or item is None:
                self.stats.malformed += 1
                return
            self._streamed.setdefault(item, []).append(delta)
            if delta:
                out.events.append(_make_text_delta(delta, item))
            else:
                self.stats.skip(f"{method}:empty")
            return
        if method in ("item/reasoning/textDelta", "item/reasoning/summaryTextDelta"):
            delta, item = as_str(params.get("delta")), as_str(params.get("itemId"))
            if delta is None:
                self.stats.malformed += 1
                return
            if item is not None:
                self._streamed.setdefault(item, []).append(delta)
            if delta:
                out.events.append(_make_thinking_delta(delta))
            else:
                self.stats.skip(f"{method}:empty")
            return
        if method == "item/started":
            self._item_started(as_dict(params.get("item")), out)
            return
        if method == "item/completed":
            self._item_completed(as_dict(params.get("item")), out)
            return
        if method == "turn/started":
            turn = as_dict(params.get("turn"))
            out.turn_id = as_str(turn.get("id"))
            out.turn_started = out.turn_id is not None
            self.stats.skip(method)
            return
        if method == "turn/completed":
            self._turn_completed(params, out)
            return
        if method == "thread/name/updated":
            # The thread's name (set by the user or generated): the chat thread follows it.
            name = as_str(params.get("threadName"))
            if name and name.strip():
                out.events.append(TitleChanged(title=name))
            else:
                self.stats.skip(f"{method}:empty")
            return
        if method == "thread/tokenUsage/updated":
            self._token_usage(params)
            self.stats.skip(method)
            return
        if method == "error":
            err = as_dict(params.get("error"))
            message = as_str(err.get("message")) or "codex reported an error"
            details = as_str(err.get("additionalDetails"))
            if details:
                message = f"{message} ({details})"
            retry = params.get("willRetry") is True
            if not retry and turn_id is not None:
                # A final error is followed by turn/completed "failed" with the same text:
                # held, so the thread shows it once (as the failed turn's error).
                self._held_errors[turn_id] = message
                self.stats.skip("error:held")
                return
            out.events.append(AgentError(message=message, retryable=retry))
            return
        if method == "mcpServer/startupStatus/updated" and params.get("status") == "failed":
            # The agent runs without that server's tools: the thread should know why.
            name = as_str(params.get("name")) or "?"
            why = as_str(params.get("error")) or "no reason given"
            message = f"MCP server {name} failed to start: {why}"
            out.events.append(AgentError(message=message))
            return
        if method == "serverRequest/resolved":
            # Answered (by us) or withdrawn (turn over): either way nothing to answer now.
            rid = params.get("requestId")
            if isinstance(rid, (int, str)) and not isinstance(rid, bool):
                self.pending.pop(self.request_id_for(rid), None)
        if method == "model/rerouted":
            model = as_str(params.get("toModel")) or as_str(params.get("model"))
            if model:
                self.model = model
        self.stats.skip(method)

    def _tool_started(self, item: dict[str, Any]) -> ToolStarted | None:
        kind, item_id = as_str(item.get("type")), as_str(item.get("id"))
        if kind is None or item_id is None:
            return None
        name: str | None = None
        summary = ""
        if kind == "commandExecution":
            name = "Shell"
            actions = as_list(item.get("commandActions"))
            first = as_dict(actions[0]) if len(actions) == 1 else {}
            command = as_str(first.get("command")) or as_str(item.get("command")) or ""
            summary = shell_command_summary(command)
        elif kind == "fileChange":
            name = "Edit"
            paths = [as_str(as_dict(c).get("path")) or "" for c in as_list(item.get("changes"))]
            summary = "\n".join(p for p in paths if p)
            self._file_changes[item_id] = summary
        elif kind == "mcpToolCall":
            server, tool = as_str(item.get("server")) or "mcp", as_str(item.get("tool")) or "tool"
            name = f"mcp__{server}__{tool}"
            summary = json.dumps(item.get("arguments"), default=str)
        elif kind == "dynamicToolCall":
            name = as_str(item.get("tool")) or "tool"
            summary = json.dumps(item.get("arguments"), default=str)
        elif kind == "webSearch":
            name, summary = "WebSearch", as_str(item.get("query")) or ""
        elif kind == "imageView":
            name, summary = "ViewImage", as_str(item.get("path")) or ""
        elif kind == "collabAgentToolCall":
            name, summary = as_str(item.get("tool")) or "Agent", as_str(item.get("prompt")) or ""
        if name is None:
            return None
        summary = cut(summary, MAX_SUMMARY_CHARS)
        return _make_tool_started(item_id, name, clean_tool_name(name), summary)

    def _item_started(self, item: dict[str, Any], out: ParsedLine) -> None:
        kind = as_str(item.get("type"))
        if kind is None:
            self.stats.malformed += 1
            return
        started = self._tool_started(item)
        if started is None:
            self.stats.skip(f"item/started:{kind}")
            return
        out.events.append(started)

    def _item_completed(self, item: dict[str, Any], out: ParsedLine) -> None:
        kind, item_id = as_str(item.get("type")), as_str(item.get("id"))
        if kind is None or item_id is None:
            self.stats.malformed += 1
            return
        if kind == "agentMessage":
            text = as_str(item.get("text")) or ""
            streamed = "".join(self._streamed.pop(item_id, ()))
            rest = text[len(streamed) :] if text.startswith(streamed) else ""
            if rest:
                out.events.append(_make_text_delta(rest, item_id))
            else:  # everything was streamed already
                self.stats.skip("item/completed:agentMessage")
            return
        if kind == "reasoning":
            streamed = "".join(self._streamed.pop(item_id, ()))
            parts = as_list(item.get("summary")) or as_list(item.get("content"))
            text = "\n".join(
                p for p in (as_str(x) or as_str(as_dict(x).get("text")) for x in parts) if p
            )
            if text and not streamed:
                out.events.append(_make_thinking_delta(text))
            else:
                self.stats.skip("item/completed:reasoning")
            return
        finished = self._tool_finished(kind, item_id, item)
        if finished is None:
            self.stats.skip(f"item/completed:{kind}")
            return
        out.events.append(finished)

    def _tool_finished(self, kind: str, item_id: str, item: dict[str, Any]) -> ToolFinished | None:
        status = as_str(item.get("status")) or ""
        failed = status in ("failed", "declined")
        result = ""
        if kind == "commandExecution":
            result = as_str(item.get("aggregatedOutput")) or ""
            code = as_int(item.get("exitCode"))
            failed = failed or (code is not None and code != 0)
            if status == "declined" and not result:
                result = "declined"
        elif kind == "fileChange":
            result = self._file_changes.pop(item_id, "") or status
        elif kind == "mcpToolCall":
            err = item.get("error")
            if err:
                failed = True
                result = as_str(as_dict(err).get("message")) or json.dumps(err, default=str)
            else:
                res = as_dict(item.get("result"))
                texts = [as_str(as_dict(c).get("text")) for c in as_list(res.get("content"))]
                result = "\n".join(t for t in texts if t) or json.dumps(
                    res.get("structuredContent") or res or "", default=str
                )
        elif kind == "dynamicToolCall":
            texts = [as_str(as_dict(c).get("text")) for c in as_list(item.get("contentItems"))]
            result = "\n".join(t for t in texts if t)
            failed = failed or item.get("success") is False
        elif kind in ("webSearch", "imageView", "collabAgentToolCall"):
            result = status
        else:
            return None
        return _make_tool_finished(item_id, cut(result, MAX_RESULT_CHARS), failed)

    def _token_usage(self, params: dict[str, Any]) -> None:
        usage = as_dict(params.get("tokenUsage"))
        window = as_int(usage.get("modelContextWindow"))
        if window is not None:
            self.context_window = window
        total = _usage_numbers(as_dict(usage.get("total")))
        turn_id = as_str(params.get("turnId"))
        # Codex repeats the totals (after an interrupt, after a resume): only growth counts.
        if turn_id is not None:
            acc = self._turn_usage.setdefault(turn_id, {})
            for key, value in total.items():
                grew = value - self._last_total.get(key, 0)
                if grew > 0:
                    acc[key] = acc.get(key, 0) + grew
        self._last_total = total

    def _turn_completed(self, params: dict[str, Any], out: ParsedLine) -> None:
        turn = as_dict(params.get("turn"))
        turn_id = as_str(turn.get("id"))
        status = as_str(turn.get("status"))
        if turn_id is None or status is None:
            self.stats.malformed += 1
            return
        out.turn_id, out.turn_ended = turn_id, True
        self.forget_turn_requests(turn_id)
        used = self._turn_usage.pop(turn_id, {})
        usage = Usage(
            input_tokens=used.get("inputTokens"),
            output_tokens=used.get("outputTokens"),
            cache_read_tokens=used.get("cachedInputTokens"),
            cache_write_tokens=used.get("cacheWriteInputTokens"),
            context_window=self.context_window,
        )
        thread_id = as_str(params.get("threadId"))
        duration = as_int(turn.get("durationMs"))
        held = self._held_errors.pop(turn_id, None)
        if held is not None and status != "failed":
            out.events.append(AgentError(message=held))
        if status == "interrupted":
            event: AgentEvent = TurnAborted(reason="interrupted")
        elif status == "failed":
            err = as_dict(turn.get("error"))
            event = TurnCompleted(
                session_id=thread_id,
                duration_ms=duration,
                usage=usage,
                model=self.model,
                is_error=True,
                error=as_str(err.get("message")) or held or "the turn failed",
            )
        else:
            event = TurnCompleted(
                session_id=thread_id, duration_ms=duration, usage=usage, model=self.model
            )
        out.events.append(event)

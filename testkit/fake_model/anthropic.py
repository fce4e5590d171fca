"""A scripted Anthropic Messages API on 127.0.0.1, as far as Claude Code 2.1.197 uses it.

``HEAD /`` answers 200 (the CLI's connectivity probe, served by ``base``);
``POST /v1/messages`` streams a reply as server-sent events; ``POST
/v1/messages/count_tokens`` answers a fixed count. The reply is chosen from the last user
message (``role: "system"`` messages, which the CLI appends after the user's, are skipped):

- a ``tool_result`` in it -> ``Tool said: <the result>`` (the second half of a tool call);
- ``TOOLTEST`` -> a ``Bash`` call running ``echo hi``;
- ``TOUCHTEST`` -> a ``Bash`` call running ``touch touched.txt`` (needs permission);
- ``MCPTEST [name] [{json arguments}]`` -> a call of the offered ``mcp__*`` tool ending in
  ``name``, else the first one (text when none is offered), with those arguments (none by
  default);
- ``PWDTEST`` -> a ``Bash`` call running ``pwd`` (where do tools run?);
- ``SLEEPTEST`` -> a ``Bash`` call running ``sleep 30`` (a tool to interrupt);
- ``ASKTEST`` -> an ``AskUserQuestion`` call (Red or Blue?);
- ``THINKTEST`` -> a thinking block, then text;
- ``SLOWTEST`` -> ``slow_chunks`` text chunks, ``slow_delay`` seconds apart;
- a title request (the CLI's ``generate_session_title``: a system prompt "Generate a
  concise, sentence-case title ...", JSON output) -> ``{"title": "Fake conversation title"}``;
- anything else -> ``Hello from fake model.`` in four chunks.

``messages_requests()`` lists the agent's model calls, ``title_requests()`` the title calls.
``error_replies`` makes the next requests (not title requests) fail with an HTTP error
(529 overloaded, 401 ...).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from typing import Any

from threadspindle.testkit.fake_model.base import (
    FakeModelServer,
    JSONResponse,
    RecordedRequest,
    SSEEvent,
    SSEResponse,
    scenario_of,
)

__all__ = ["TITLE", "FakeAnthropic", "is_title_request", "last_user_message", "user_text"]

DEFAULT_MODEL = "claude-opus-4-8"
TITLE = "Fake conversation title"
ASK_QUESTION = "Which color should the button be?"


def last_user_message(body: Any) -> dict[str, Any] | None:
    """The last ``role: "user"`` message (the CLI puts ``system`` ones after it)."""
    if not isinstance(body, dict):
        return None
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            return message
    return None


def is_title_request(body: Any) -> bool:
    """Claude Code's session-title call (its system prompt asks for a short title)."""
    system = body.get("system") if isinstance(body, dict) else None
    blocks = system if isinstance(system, list) else [{"text": system}]
    return any(
        "Generate a concise, sentence-case title" in str(b.get("text", ""))
        for b in blocks
        if isinstance(b, dict)
    )


def user_text(message: dict[str, Any] | None) -> str:
    """All text of one message (its content is a string or a list of blocks)."""
    if message is None:
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    texts = [
        block.get("text", "")
        for block in content or []
        if isinstance(block, dict) and block.get("type") == "text"
    ]
    return "\n".join(t for t in texts if isinstance(t, str))


def _prompt_of(text: str) -> str:
    """The user's own words: without ``<system-reminder>`` blocks and interrupt markers."""
    text = re.sub(r"<system-reminder>.*?</system-reminder>", "", text, flags=re.S)
    lines = [ln for ln in text.splitlines() if not ln.startswith("[Request interrupted")]
    return "\n".join(lines).strip()


def _mcp_tool(body: dict[str, Any], text: str) -> str | None:
    """``MCPTEST [name]``: the offered ``mcp__*`` tool ending in ``name``, else the first."""
    names = [
        t.get("name", "")
        for t in body.get("tools") or []
        if isinstance(t, dict) and str(t.get("name", "")).startswith("mcp__")
    ]
    wanted = re.search(r"MCPTEST\s+(\w+)", text)
    if wanted:
        # The tool itself ("start_process"), not one whose name ends the same way
        # ("restart_process").
        exact = [n for n in names if n.endswith("__" + wanted.group(1))]
        names = exact or [n for n in names if n.endswith(wanted.group(1))] or names
    return names[0] if names else None


def _mcp_arguments(text: str) -> dict[str, Any]:
    """``MCPTEST name {"a": 1}``: the JSON object after the tool's name, else none."""
    found = re.search(r"MCPTEST\s+\w+\s+(\{.*\})", text, re.S)
    if found is None:
        return {}
    try:
        arguments = json.loads(found.group(1))
    except ValueError:
        return {}
    return arguments if isinstance(arguments, dict) else {}


def _tool_result(message: dict[str, Any] | None) -> str | None:
    if message is None or not isinstance(message.get("content"), list):
        return None
    for block in message["content"]:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            content = block.get("content")
            if isinstance(content, list):
                content = "\n".join(
                    c.get("text", "") for c in content if isinstance(c, dict) and "text" in c
                )
            return str(content)
    return None


class FakeAnthropic(FakeModelServer):
    """The fake Anthropic server. ``messages_requests()`` lists what the CLI asked."""

    def __init__(self, *, slow_chunks: int = 40, slow_delay: float = 0.5) -> None:
        super().__init__()
        self.slow_chunks = slow_chunks
        self.slow_delay = slow_delay
        self._ids = itertools.count(1)
        # (HTTP status, Anthropic error type) answered to the next /v1/messages requests.
        self.error_replies: list[tuple[int, str]] = []
        self.route("POST", "/v1/messages/count_tokens", self._count_tokens)
        self.route("POST", "/v1/messages", self._messages)

    def messages_requests(self) -> list[RecordedRequest]:
        """The model calls of the agent's turns (title requests left out)."""
        return [r for r in self._all_messages() if not is_title_request(r.body)]

    def title_requests(self) -> list[RecordedRequest]:
        return [r for r in self._all_messages() if is_title_request(r.body)]

    def _all_messages(self) -> list[RecordedRequest]:
        return [
            r
            for r in self.requests
            if r.method == "POST" and r.path.split("?", 1)[0] == "/v1/messages"
        ]

    # routes --------------------------------------------------------------------------------
    def _count_tokens(self, request: RecordedRequest) -> JSONResponse:
        return JSONResponse({"input_tokens": 10})

    def _messages(self, request: RecordedRequest) -> SSEResponse | JSONResponse:
        body = request.body if isinstance(request.body, dict) else {}
        if is_title_request(body):  # never one of the scripted errors: it runs aside
            model = str(body.get("model") or DEFAULT_MODEL)
            return self._stream(model, [("text", [json.dumps({"title": TITLE})])], "end_turn")
        if self.error_replies:
            status, kind = self.error_replies.pop(0)
            error = {"type": kind, "message": f"fake {kind}"}
            return JSONResponse({"type": "error", "error": error}, status)
        asked = body.get("model")
        model = asked if isinstance(asked, str) else DEFAULT_MODEL
        message = last_user_message(body)
        text = _prompt_of(user_text(message))
        result = _tool_result(message)
        # After an interrupt the CLI sends the rejected tool_result and the next prompt in
        # one message: the prompt is what to answer then.
        if result is not None and not text:
            return self._stream(model, [("text", [f"Tool said: {result}"])], "end_turn")
        scenario = scenario_of(text)
        if scenario == "TOOLTEST":
            return self._tool(model, "Bash", {"command": "echo hi", "description": "Print hi"})
        if scenario == "TOUCHTEST":
            touch = {"command": "touch touched.txt", "description": "Run command"}
            return self._tool(model, "Bash", touch)
        if scenario == "MCPTEST":
            tool = _mcp_tool(body, text)
            if tool is None:
                return self._stream(model, [("text", ["No MCP tools offered."])], "end_turn")
            return self._tool(model, tool, _mcp_arguments(text))
        if "PWDTEST" in text:
            return self._tool(model, "Bash", {"command": "pwd", "description": "Print cwd"})
        if "SLEEPTEST" in text:
            sleep = {"command": "sleep 30", "description": "Wait", "timeout": 60000}
            return self._tool(model, "Bash", sleep)
        if "ASKTEST" in text:
            return self._tool(model, "AskUserQuestion", _ask_input())
        if "THINKTEST" in text:
            blocks = [("thinking", ["Let me ", "think."]), ("text", ["Thought ", "done."])]
            return self._stream(model, blocks, "end_turn")
        if scenario == "SLOWTEST":
            chunks = [f"chunk{i} " for i in range(self.slow_chunks)]
            return self._stream(model, [("text", chunks)], "end_turn", delay=self.slow_delay)
        return self._stream(model, [("text", ["Hello ", "from ", "fake ", "model."])], "end_turn")

    # SSE building --------------------------------------------------------------------------
    def _start(self, model: str) -> SSEEvent:
        message: dict[str, Any] = {
            "id": f"msg_fake{next(self._ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 10,
                "output_tokens": 1,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }
        return SSEEvent({"type": "message_start", "message": message}, event="message_start")

    def _end(self, stop_reason: str) -> list[SSEEvent]:
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": 5},
        }
        return [
            SSEEvent(delta, event="message_delta"),
            SSEEvent({"type": "message_stop"}, event="message_stop"),
        ]

    def _stream(
        self,
        model: str,
        blocks: list[tuple[str, list[str]]],
        stop_reason: str,
        *,
        delay: float = 0.0,
    ) -> SSEResponse:
        def events() -> Iterator[SSEEvent]:
            yield self._start(model)
            for index, (kind, chunks) in enumerate(blocks):
                empty = {"type": "thinking", "thinking": ""} if kind == "thinking" else {}
                block = empty or {"type": "text", "text": ""}
                yield SSEEvent(
                    {"type": "content_block_start", "index": index, "content_block": block},
                    event="content_block_start",
                )
                for chunk in chunks:
                    delta = (
                        {"type": "thinking_delta", "thinking": chunk}
                        if kind == "thinking"
                        else {"type": "text_delta", "text": chunk}
                    )
                    yield SSEEvent(
                        {"type": "content_block_delta", "index": index, "delta": delta},
                        event="content_block_delta",
                        delay=delay,
                    )
                if kind == "thinking":
                    signature = {"type": "signature_delta", "signature": "fake-signature"}
                    yield SSEEvent(
                        {"type": "content_block_delta", "index": index, "delta": signature},
                        event="content_block_delta",
                    )
                yield SSEEvent(
                    {"type": "content_block_stop", "index": index}, event="content_block_stop"
                )
            yield from self._end(stop_reason)

        return SSEResponse(events())

    def _tool(self, model: str, name: str, tool_input: dict[str, Any]) -> SSEResponse:
        tool_id = f"toolu_fake{next(self._ids):06d}"

        def events() -> Iterator[SSEEvent]:
            yield self._start(model)
            block = {"type": "tool_use", "id": tool_id, "name": name, "input": {}}
            yield SSEEvent(
                {"type": "content_block_start", "index": 0, "content_block": block},
                event="content_block_start",
            )
            delta = {"type": "input_json_delta", "partial_json": json.dumps(tool_input)}
            yield SSEEvent(
                {"type": "content_block_delta", "index": 0, "delta": delta},
                event="content_block_delta",
            )
            yield SSEEvent({"type": "content_block_stop", "index": 0}, event="content_block_stop")
            yield from self._end("tool_use")

        return SSEResponse(events())


def _ask_input() -> dict[str, Any]:
    return {
        "questions": [
            {
                "question": ASK_QUESTION,
                "header": "Color",
                "options": [
                    {"label": "Red", "description": "A warm button"},
                    {"label": "Blue", "description": "A cool button"},
                ],
                "multiSelect": False,
            }
        ]
    }

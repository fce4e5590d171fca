"""A scripted fake of the OpenAI Chat Completions API (``POST /v1/chat/completions``, SSE),
as opencode's ``@ai-sdk/openai-compatible`` provider uses it.

opencode sends one streamed request per model call (``stream: true``,
``stream_options.include_usage``): the whole history in ``messages`` (a system prompt, user
turns, assistant turns with ``tool_calls``, ``role: "tool"`` results), the tools offered in
``tools`` (``bash``, ``edit``, ``read`` ...). A new session also triggers a title-generation
call without tools whose system prompt starts "You are a title generator" (see
``fixtures/agent-cli/requests/opencode.jsonl``). It needs ``chat.completion.chunk`` objects
with ``delta.content`` / ``delta.tool_calls``, a ``finish_reason``, a usage chunk and
``data: [DONE]``.

The reply is picked from the last user text (``base.scenario_of``):

* a title request: a short title, at once (never slow, never a tool call).
* the last message is a tool result: ``Tool said: <output>``.
* ``TOOLTEST``: a ``bash`` call ``echo hi``.
* ``TOUCHTEST``: a ``bash`` call ``touch touched.txt`` (asks when bash needs permission).
* ``PWDTEST``: a ``bash`` call ``pwd`` (where do tools run?).
* ``SLOWTEST`` / ``CRASHTEST``: ``slow_chunks`` text chunks ``slow_delay`` seconds apart.
* ``MCPTEST``: a call of the first offered tool that is not one of opencode's built-ins.
* ``QUESTIONTEST``: a call of opencode's ``question`` tool ("Which color?": Red / Blue).
* anything else: ``Hello from fake model.`` in a few deltas.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

from threadspindle.testkit.fake_model.base import (
    FakeModelServer,
    JSONResponse,
    RecordedRequest,
    SSEEvent,
    SSEResponse,
    scenario_of,
)

__all__ = ["HELLO", "OpenAIChatFake", "is_title_request", "last_user_text", "tool_names"]

HELLO = "Hello from fake model."
TITLE = "Fake conversation title"
BUILTIN_TOOLS = frozenset(
    {
        "bash",
        "edit",
        "glob",
        "grep",
        "list",
        "question",
        "read",
        "skill",
        "task",
        "todoread",
        "todowrite",
        "webfetch",
        "websearch",
        "write",
        "patch",
        "lsp",
    }
)

QUESTION = {
    "questions": [
        {
            "question": "Which color?",
            "header": "Color",
            "options": [
                {"label": "Red", "description": "warm"},
                {"label": "Blue", "description": "cool"},
            ],
        }
    ]
}

Script = Callable[[RecordedRequest], "list[SSEEvent] | None"]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return ""


def _messages(body: Any) -> list[dict[str, Any]]:
    messages = body.get("messages") if isinstance(body, dict) else None
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []


def last_user_text(body: Any) -> str:
    """The text of the last ``role: "user"`` message."""
    for message in reversed(_messages(body)):
        if message.get("role") == "user":
            return _content_text(message.get("content"))
    return ""


def tool_names(body: Any) -> list[str]:
    tools = body.get("tools") if isinstance(body, dict) else None
    if not isinstance(tools, list):
        return []
    names = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


def is_title_request(body: Any) -> bool:
    """opencode's title-generation call: no tools, a "title generator" system prompt."""
    messages = _messages(body)
    system = _content_text(messages[0].get("content")) if messages else ""
    return "title generator" in system or (not tool_names(body) and "title" in system.lower())


def _last_tool_output(body: Any) -> str | None:
    messages = _messages(body)
    if messages and messages[-1].get("role") == "tool":
        return _content_text(messages[-1].get("content"))
    return None


class OpenAIChatFake:
    """Chat Completions on a ``FakeModelServer``; ``base_url`` ends in ``/v1``.

    ``slow_delay``/``slow_chunks`` shape SLOWTEST; ``text_delay`` spaces the deltas of a
    short answer; ``script`` (request -> events or None) overrides the scenarios for a test.
    """

    def __init__(
        self,
        server: FakeModelServer | None = None,
        *,
        slow_delay: float = 0.5,
        slow_chunks: int = 40,
        text_delay: float = 0.0,
        script: Script | None = None,
    ) -> None:
        self.server = server or FakeModelServer()
        self.slow_delay = slow_delay
        self.slow_chunks = slow_chunks
        self.text_delay = text_delay
        self.script = script
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.server.route("POST", "/v1/chat/completions", self._completions)
        self.server.route("GET", "/v1/models", lambda req: JSONResponse(self._models()))

    # lifecycle -------------------------------------------------------------------------
    def start(self, port: int = 0) -> str:
        self.server.start(port)
        return self.base_url

    def stop(self) -> None:
        self.server.stop()

    def down(self) -> int:
        return self.server.down()

    @property
    def base_url(self) -> str:
        return self.server.base_url + "/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        return [r for r in self.server.requests if r.path.startswith("/v1/chat/completions")]

    def agent_requests(self) -> list[RecordedRequest]:
        """The model calls that are not title generation."""
        return [r for r in self.requests if not is_title_request(r.body)]

    def __enter__(self) -> OpenAIChatFake:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # replies ---------------------------------------------------------------------------
    def _models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}

    def _next_id(self) -> str:
        with self._lock:
            return f"chatcmpl-fake{next(self._ids)}"

    def _completions(self, req: RecordedRequest) -> SSEResponse:
        events = self.script(req) if self.script is not None else None
        if events is None:
            events = list(self.reply_for(req.body))
        return SSEResponse(events)

    def reply_for(self, body: Any) -> Iterator[SSEEvent]:
        """The scripted SSE events for one request body."""
        model = body.get("model", "fake-model") if isinstance(body, dict) else "fake-model"
        if is_title_request(body):
            yield from self.text_reply(model, [TITLE], delay=0.0)
            return
        tool_output = _last_tool_output(body)
        if tool_output is not None:
            yield from self.text_reply(model, ["Tool ", "said: ", tool_output.rstrip("\n")])
            return
        user_text = last_user_text(body)
        scenario = "QUESTIONTEST" if "QUESTIONTEST" in user_text else scenario_of(user_text)
        extra = [n for n in tool_names(body) if n not in BUILTIN_TOOLS]
        if scenario == "QUESTIONTEST" and "question" in tool_names(body):
            yield from self.tool_call_reply(model, "question", QUESTION)
        elif scenario == "TOOLTEST":
            yield from self.tool_call_reply(
                model, "bash", {"command": "echo hi", "description": "Run command"}
            )
        elif scenario == "TOUCHTEST":
            yield from self.tool_call_reply(
                model, "bash", {"command": "touch touched.txt", "description": "Run command"}
            )
        elif scenario == "PWDTEST":
            yield from self.tool_call_reply(
                model, "bash", {"command": "pwd", "description": "Print the working directory"}
            )
        elif scenario in ("SLOWTEST", "CRASHTEST"):
            chunks = [f"chunk{i} " for i in range(self.slow_chunks)]
            yield from self.text_reply(model, chunks, delay=self.slow_delay)
        elif scenario == "MCPTEST" and extra:
            yield from self.tool_call_reply(model, extra[0], {})
        else:
            yield from self.text_reply(model, ["Hello ", "from ", "fake ", "model."])

    def _chunk(
        self, cid: str, model: str, delta: dict[str, Any], finish: str | None = None
    ) -> dict[str, Any]:
        return {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": 1795300000,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    def _ending(self, cid: str, model: str, finish: str) -> Iterator[SSEEvent]:
        yield SSEEvent(self._chunk(cid, model, {}, finish))
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        yield SSEEvent(
            {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": 1795300000,
                "model": model,
                "choices": [],
                "usage": usage,
            }
        )
        yield SSEEvent("[DONE]")

    def text_reply(
        self, model: str, chunks: list[str], delay: float | None = None
    ) -> Iterator[SSEEvent]:
        cid = self._next_id()
        gap = self.text_delay if delay is None else delay
        yield SSEEvent(self._chunk(cid, model, {"role": "assistant", "content": ""}))
        for i, chunk in enumerate(chunks):
            yield SSEEvent(self._chunk(cid, model, {"content": chunk}), delay=gap if i else 0.0)
        yield from self._ending(cid, model, "stop")

    def tool_call_reply(
        self, model: str, name: str, arguments: dict[str, Any]
    ) -> Iterator[SSEEvent]:
        cid = self._next_id()
        call_id = f"call_{cid[-6:]}{name[:4]}"
        yield SSEEvent(self._chunk(cid, model, {"role": "assistant", "content": None}))
        call = {
            "index": 0,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        yield SSEEvent(self._chunk(cid, model, {"tool_calls": [call]}))
        yield from self._ending(cid, model, "tool_calls")

"""A scripted fake of the OpenAI Responses API (``POST /v1/responses``, SSE), as Codex uses it.

Codex sends one streamed ``POST /v1/responses`` per model call: the whole history in
``input`` (developer messages, an ``<environment_context>`` user message, the user's text,
earlier answers, ``function_call`` / ``function_call_output`` pairs), and it needs the SSE
events ``response.created``, ``response.output_item.added``, ``response.output_text.delta``,
``response.output_item.done`` and ``response.completed`` (with ``usage``) to finish a model
call (see ``fixtures/agent-cli/requests/codex.jsonl``).

The reply is picked from the last real user text (``base.scenario_of``):

* ``TOOLTEST``: a shell call ``exec_command {"cmd": "echo hi"}``; after its result comes
  back (the last input item is a ``function_call_output``) the answer is ``Tool said: ...``.
* ``TOUCHTEST``: a shell call ``touch touched.txt`` (needs approval under ``untrusted``);
  with the word ``ask`` the call asks for approval itself (``sandbox_permissions:
  "require_escalated"``), as a model does under codex's default policy, ``on-request``.
* ``PWDTEST``: a shell call ``pwd`` (where do tools run?).
* ``SLOWTEST`` / ``CRASHTEST``: ``slow_chunks`` text chunks ``slow_delay`` seconds apart.
* ``MCPTEST``: a call of the first ``mcp__*`` tool offered (text when none is offered).
* ``PATCHTEST`` (this fake only): an ``apply_patch`` call adding ``patched.txt``.
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

__all__ = ["HELLO", "PATCH", "OpenAIResponsesFake", "last_user_text", "tool_names"]

HELLO = "Hello from fake model."
# PATCHTEST (this API only): an apply_patch call that adds patched.txt.
PATCH = "*** Begin Patch\n*** Add File: patched.txt\n+patched by the fake\n*** End Patch\n"

# Codex wraps context and bookkeeping in user-role messages; they are not what the user typed.
_SYNTHETIC_PREFIXES = ("<environment_context>", "<turn_aborted>", "<user_instructions>")

Script = Callable[[RecordedRequest], "list[SSEEvent] | None"]


def _message_text(item: dict[str, Any]) -> str:
    parts = item.get("content")
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return ""
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict) and "text" in p)


def last_user_text(body: Any) -> str:
    """The last user message of a Responses request that a person typed (not context)."""
    items = body.get("input") if isinstance(body, dict) else None
    if not isinstance(items, list):
        return ""
    for item in reversed(items):
        if not isinstance(item, dict) or item.get("role") != "user":
            continue
        text = _message_text(item)
        if text.lstrip().startswith(_SYNTHETIC_PREFIXES):
            continue
        return text
    return ""


def tool_names(body: Any) -> list[str]:
    tools = body.get("tools") if isinstance(body, dict) else None
    if not isinstance(tools, list):
        return []
    return [str(t.get("name")) for t in tools if isinstance(t, dict) and t.get("name")]


def _last_tool_output(body: Any) -> str | None:
    items = body.get("input") if isinstance(body, dict) else None
    if isinstance(items, list) and items:
        last = items[-1]
        if isinstance(last, dict) and last.get("type") == "function_call_output":
            out = last.get("output")
            if isinstance(out, str):
                return out
            return json.dumps(out)
        if isinstance(last, dict) and last.get("type") == "custom_tool_call_output":
            out = last.get("output")
            return out if isinstance(out, str) else json.dumps(out)
    return None


class OpenAIResponsesFake:
    """The Responses API on a ``FakeModelServer``; ``base_url`` ends in ``/v1``.

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
        self.server.route("POST", "/v1/responses", self._responses)
        self.server.route("GET", "/v1/models", lambda req: JSONResponse({"data": []}))

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
        return [r for r in self.server.requests if r.path.startswith("/v1/responses")]

    def __enter__(self) -> OpenAIResponsesFake:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # replies ---------------------------------------------------------------------------
    def _next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def _responses(self, req: RecordedRequest) -> SSEResponse:
        events = self.script(req) if self.script is not None else None
        if events is None:
            events = list(self.reply_for(req.body))
        return SSEResponse(events)

    def reply_for(self, body: Any) -> Iterator[SSEEvent]:
        """The scripted SSE events for one request body."""
        model = body.get("model", "fake") if isinstance(body, dict) else "fake"
        tool_output = _last_tool_output(body)
        if tool_output is not None:
            yield from self.text_reply(model, [f"Tool said: {tool_output}".rstrip("\n")])
            return
        user_text = last_user_text(body)
        scenario = scenario_of(user_text)
        if "PATCHTEST" in user_text:
            yield from self.custom_tool_call_reply(model, "apply_patch", PATCH)
        elif scenario == "TOOLTEST":
            yield from self.tool_call_reply(model, "exec_command", {"cmd": "echo hi"})
        elif scenario == "TOUCHTEST":
            touch: dict[str, Any] = {"cmd": "touch touched.txt"}
            if "ask" in user_text.split():
                # Under codex's default policy (on-request) only the model can ask.
                touch |= {"sandbox_permissions": "require_escalated", "justification": "May I?"}
            yield from self.tool_call_reply(model, "exec_command", touch)
        elif scenario == "PWDTEST":
            yield from self.tool_call_reply(model, "exec_command", {"cmd": "pwd"})
        elif scenario in ("SLOWTEST", "CRASHTEST"):
            chunks = [f"chunk {i} " for i in range(self.slow_chunks)]
            yield from self.text_reply(model, chunks, delay=self.slow_delay)
        elif scenario == "MCPTEST" and any(n.startswith("mcp__") for n in tool_names(body)):
            name = next(n for n in tool_names(body) if n.startswith("mcp__"))
            yield from self.tool_call_reply(model, name, {})
        else:
            yield from self.text_reply(model, ["Hello ", "from ", "fake ", "model."])

    def _created(self, resp_id: str, model: str) -> SSEEvent:
        response = {"id": resp_id, "object": "response", "status": "in_progress", "model": model}
        return SSEEvent({"type": "response.created", "response": response}, "response.created")

    def _completed(self, resp_id: str, model: str, output: list[dict[str, Any]]) -> SSEEvent:
        usage = {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        }
        response = {
            "id": resp_id,
            "object": "response",
            "status": "completed",
            "model": model,
            "output": output,
            "usage": usage,
        }
        return SSEEvent({"type": "response.completed", "response": response}, "response.completed")

    def text_reply(
        self, model: str, chunks: list[str], delay: float | None = None
    ) -> Iterator[SSEEvent]:
        n = self._next_id()
        resp_id, msg_id = f"resp_{n}", f"msg_fake{n:06d}"
        pause = self.text_delay if delay is None else delay
        yield self._created(resp_id, model)
        item = {
            "type": "message",
            "id": msg_id,
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        yield SSEEvent(
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            "response.output_item.added",
        )
        part = {"type": "output_text", "text": "", "annotations": []}
        yield SSEEvent(
            {
                "type": "response.content_part.added",
                "item_id": msg_id,
                "output_index": 0,
                "content_index": 0,
                "part": part,
            },
            "response.content_part.added",
        )
        for i, chunk in enumerate(chunks):
            yield SSEEvent(
                {
                    "type": "response.output_text.delta",
                    "item_id": msg_id,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": chunk,
                },
                "response.output_text.delta",
                delay=pause if i else 0.0,
            )
        text = "".join(chunks)
        done = {
            "type": "message",
            "id": msg_id,
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        yield SSEEvent(
            {"type": "response.output_item.done", "output_index": 0, "item": done},
            "response.output_item.done",
        )
        yield self._completed(resp_id, model, [done])

    def custom_tool_call_reply(self, model: str, name: str, text: str) -> Iterator[SSEEvent]:
        """A freeform ("custom") tool call, the way codex's ``apply_patch`` is called."""
        n = self._next_id()
        resp_id, item_id, call_id = f"resp_{n}", f"ctc_fake{n:06d}", f"call_fake{n:06d}"
        yield self._created(resp_id, model)
        added = {
            "type": "custom_tool_call",
            "id": item_id,
            "call_id": call_id,
            "name": name,
            "input": "",
            "status": "in_progress",
        }
        yield SSEEvent(
            {"type": "response.output_item.added", "output_index": 0, "item": added},
            "response.output_item.added",
        )
        done = dict(added, input=text, status="completed")
        yield SSEEvent(
            {"type": "response.output_item.done", "output_index": 0, "item": done},
            "response.output_item.done",
        )
        yield self._completed(resp_id, model, [done])

    def tool_call_reply(
        self, model: str, name: str, arguments: dict[str, Any]
    ) -> Iterator[SSEEvent]:
        n = self._next_id()
        resp_id, item_id, call_id = f"resp_{n}", f"fc_fake{n:06d}", f"call_fake{n:06d}"
        args = json.dumps(arguments)
        yield self._created(resp_id, model)
        added = {
            "type": "function_call",
            "id": item_id,
            "call_id": call_id,
            "name": name,
            "arguments": "",
            "status": "in_progress",
        }
        yield SSEEvent(
            {"type": "response.output_item.added", "output_index": 0, "item": added},
            "response.output_item.added",
        )
        yield SSEEvent(
            {
                "type": "response.function_call_arguments.delta",
                "item_id": item_id,
                "output_index": 0,
                "delta": args,
            },
            "response.function_call_arguments.delta",
        )
        done = dict(added, arguments=args, status="completed")
        yield SSEEvent(
            {"type": "response.output_item.done", "output_index": 0, "item": done},
            "response.output_item.done",
        )
        yield self._completed(resp_id, model, [done])

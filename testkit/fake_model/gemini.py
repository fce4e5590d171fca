"""A scripted fake of the Gemini API (``generateContent`` and ``streamGenerateContent?alt=sse``)
on 127.0.0.1, for driving the genuine Gemini CLI offline.

What the CLI sends (``fixtures/agent-cli/requests/gemini.jsonl``): per prompt, first a router
classifier call ``POST /v1beta/models/<lite>:generateContent`` in JSON mode whose schema wants
``{complexity_reasoning, complexity_score}`` (skipped when the CLI runs with ``-m``), then
``POST /v1beta/models/<model>:streamGenerateContent?alt=sse`` with the whole history. The first
user content carries the ``<session_context>`` part before the user's text, so the scenario is
picked from the *last text part* of the last user content. A last content that is a
``functionResponse`` means "the tool ran": the model then reports what the tool said.

Scenarios (``base.scenario_of``): ``TOOLTEST`` calls ``run_shell_command`` with ``echo hi``;
``TOUCHTEST`` calls it with ``touch touched.txt`` (not read-only, so the CLI asks permission);
``PWDTEST`` with ``pwd`` (where do tools run?);
``SLOWTEST`` (and ``CRASHTEST``) stream 40 chunks ``slow_delay`` seconds apart; ``MCPTEST
<tool>`` calls the offered MCP tool (``mcp_<server>_<tool>``; the first one when not named)
with no arguments; anything else
answers ``Hello from fake model.`` after a short thought. ``error_replies`` makes the next
model turns fail with an HTTP error (a 503, a 500 ...).
"""

from __future__ import annotations

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

__all__ = ["FakeGeminiServer", "TEXT_ANSWER", "THOUGHT", "last_user_turn", "tool_names"]

TEXT_ANSWER = "Hello from fake model."
THOUGHT = "Considering the greeting."
MODEL_VERSION = "fake"


def _usage(prompt: int = 10, output: int = 5) -> dict[str, int]:
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt + output,
    }


def _chunk(parts: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    body: dict[str, Any] = {"candidates": [candidate], "modelVersion": MODEL_VERSION}
    if finish:
        body["usageMetadata"] = _usage()
    return body


def _words(text: str) -> list[str]:
    """Split into word-sized deltas that join back to ``text`` exactly."""
    pieces = text.split(" ")
    return [p + " " for p in pieces[:-1]] + [pieces[-1]] if pieces else [text]


def last_user_turn(body: Any) -> tuple[str, dict[str, Any] | None]:
    """The last user content's last text part, and its ``functionResponse`` if it is one."""
    if not isinstance(body, dict):
        return "", None
    contents = body.get("contents") or []
    for content in reversed(contents):
        if not isinstance(content, dict) or content.get("role") not in ("user", None):
            continue
        parts = content.get("parts") or []
        for part in reversed(parts):
            if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
                return "", part["functionResponse"]
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                return part["text"], None
        return "", None
    return "", None


def tool_names(body: Any) -> list[str]:
    """Names of the function declarations a request offers the model, in order."""
    names: list[str] = []
    tools = body.get("tools") if isinstance(body, dict) else None
    for tool in tools if isinstance(tools, list) else []:
        declarations = tool.get("functionDeclarations") if isinstance(tool, dict) else None
        for decl in declarations if isinstance(declarations, list) else []:
            if isinstance(decl, dict) and isinstance(decl.get("name"), str):
                names.append(decl["name"])
    return names


class FakeGeminiServer(FakeModelServer):
    """``FakeModelServer`` with the Gemini routes. ``slow_delay`` paces SLOWTEST chunks."""

    def __init__(self, *, slow_delay: float = 0.5, slow_chunks: int = 40) -> None:
        super().__init__()
        self.slow_delay = slow_delay
        self.slow_chunks = slow_chunks
        # (HTTP status, message) answered to the next streamGenerateContent requests.
        self.error_replies: list[tuple[int, str]] = []
        self.route("POST", "/v1beta/models/", self._models)
        self.route("GET", "/v1beta/models", self._list_models)

    # which requests were the model turns (not the router) --------------------------------
    def stream_requests(self) -> list[RecordedRequest]:
        return [r for r in list(self.requests) if ":streamGenerateContent" in r.path]

    def router_requests(self) -> list[RecordedRequest]:
        return [r for r in list(self.requests) if r.path.split("?")[0].endswith(":generateContent")]

    # routes ------------------------------------------------------------------------------
    def _list_models(self, req: RecordedRequest) -> JSONResponse:
        return JSONResponse({"models": [{"name": "models/gemini-2.5-flash"}]})

    def _models(self, req: RecordedRequest) -> JSONResponse | SSEResponse:
        bare = req.path.split("?", 1)[0]
        if bare.endswith(":streamGenerateContent"):
            if self.error_replies:
                status, message = self.error_replies.pop(0)
                error = {"code": status, "message": message, "status": "UNAVAILABLE"}
                return JSONResponse({"error": error}, status)
            return SSEResponse(self._stream(req.body))
        if bare.endswith(":countTokens"):
            return JSONResponse({"totalTokens": 10})
        if bare.endswith(":generateContent"):
            return JSONResponse(self._generate(req.body))
        return JSONResponse({"error": {"code": 404, "message": f"unknown {bare}"}}, 404)

    def _generate(self, body: Any) -> dict[str, Any]:
        """Non-streamed calls: the router classifier (JSON mode) or any other helper call."""
        config = body.get("generationConfig") if isinstance(body, dict) else None
        schema = json.dumps((config or {}).get("responseJsonSchema") or {})
        if "complexity_score" in schema:
            text = json.dumps({"complexity_reasoning": "fake router", "complexity_score": 10})
        elif (config or {}).get("responseMimeType") == "application/json":
            text = "{}"
        else:
            text = TEXT_ANSWER
        return _chunk([{"text": text}], finish="STOP")

    def _stream(self, body: Any) -> Iterator[SSEEvent]:
        text, tool_response = last_user_turn(body)
        if tool_response is not None:
            said = json.dumps(tool_response.get("response"))
            yield from self._text_events("Tool said: " + said)
            return
        scenario = scenario_of(text)
        if scenario in ("TOOLTEST", "TOUCHTEST", "PWDTEST"):
            command = {"TOOLTEST": "echo hi", "TOUCHTEST": "touch touched.txt"}.get(scenario, "pwd")
            call = {
                "name": "run_shell_command",
                "args": {"command": command, "description": "Run command"},
            }
            yield SSEEvent(_chunk([{"functionCall": call}], finish="STOP"))
            return
        mcp_tools = [n for n in tool_names(body) if n.startswith("mcp_")]
        if scenario == "MCPTEST" and mcp_tools:
            # "MCPTEST list_processes" picks the tool ending in that name; else the first.
            match = re.search(r"MCPTEST\s+(\w+)", text)
            named = [n for n in mcp_tools if match and n.endswith("_" + match.group(1))]
            call = {"name": (named or mcp_tools)[0], "args": {}}
            yield SSEEvent(_chunk([{"functionCall": call}], finish="STOP"))
            return
        if scenario in ("SLOWTEST", "CRASHTEST"):
            for i in range(self.slow_chunks):
                last = i == self.slow_chunks - 1
                yield SSEEvent(
                    _chunk([{"text": f"chunk{i} "}], finish="STOP" if last else None),
                    delay=self.slow_delay if i else 0.0,
                )
            return
        yield SSEEvent(_chunk([{"text": THOUGHT, "thought": True}]))
        yield from self._text_events(TEXT_ANSWER)

    def _text_events(self, text: str) -> Iterator[SSEEvent]:
        words = _words(text)
        for i, word in enumerate(words):
            yield SSEEvent(_chunk([{"text": word}], finish="STOP" if i == len(words) - 1 else None))

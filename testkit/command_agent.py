"""A small coding agent for the generic ``command`` adapter, talking to a Chat Completions
model server (in tests, ``testkit/fake_model/openai_chat.py``).

It speaks the command protocol (``agents/command.py``): the prompt on stdin, one JSON event
per stdout line. Per turn it prints ``session`` (``SPINDLE_SESSION_ID``, or a new id), then
asks the model with the session's history and a ``bash`` tool, streaming each content delta
as ``text``; a tool call is run with ``bash -c`` in its working directory (``tool_start`` /
``tool_end``) and its output sent back to the model, until the model answers without a tool
call. The history is kept in ``$HOME/.command-agent/<session>.json``, so a later process
given the same ``SPINDLE_SESSION_ID`` continues the conversation (resume). Nothing asks
permission: the command protocol has none.

Run as ``python -I command_agent.py`` (standard library only); the model server's base URL
(ending in ``/v1``) is ``COMMAND_AGENT_BASE_URL``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

MODEL = "fake-model"
MAX_STEPS = 5  # model calls per turn: a tool loop cannot run away
BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command in the working directory.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


def out(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def ask_model(base_url: str, messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """One streamed model call: the answer text (streamed out as it comes) and the tool
    calls, assembled from their deltas."""
    body = {"model": MODEL, "stream": True, "messages": messages, "tools": [BASH_TOOL]}
    request = urllib.request.Request(
        base_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk-fake"},
    )
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    with urllib.request.urlopen(request, timeout=60) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data:") :])
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    text.append(delta["content"])
                    out(type="text", text=delta["content"])
                for call in delta.get("tool_calls") or []:
                    slot = calls.setdefault(call["index"], {"id": "", "name": "", "arguments": ""})
                    slot["id"] = call.get("id") or slot["id"]
                    function = call.get("function") or {}
                    slot["name"] += function.get("name") or ""
                    slot["arguments"] += function.get("arguments") or ""
    return "".join(text), [calls[i] for i in sorted(calls)]


def run_tool(call: dict[str, Any]) -> tuple[str, bool]:
    try:
        command = json.loads(call["arguments"] or "{}")["command"]
    except (ValueError, KeyError, TypeError):
        return f"bad arguments for {call['name']}: {call['arguments']!r}", True
    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=120, check=False
    )
    return done.stdout + done.stderr, done.returncode != 0


def main() -> int:
    prompt = sys.stdin.read()
    base_url = os.environ["COMMAND_AGENT_BASE_URL"]
    session = os.environ.get("SPINDLE_SESSION_ID") or str(uuid.uuid4())
    store = Path(os.environ["HOME"]) / ".command-agent" / f"{session}.json"
    messages: list[dict[str, Any]] = json.loads(store.read_text()) if store.exists() else []
    messages.append({"role": "user", "content": prompt})
    out(type="session", id=session, model=MODEL)
    for _ in range(MAX_STEPS):
        text, calls = ask_model(base_url, messages)
        if not calls:
            messages.append({"role": "assistant", "content": text})
            break
        messages.append(
            {
                "role": "assistant",
                "content": text or None,
                "tool_calls": [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                    for c in calls
                ],
            }
        )
        for call in calls:
            out(type="tool_start", id=call["id"], name=call["name"], input=call["arguments"])
            result, failed = run_tool(call)
            out(type="tool_end", id=call["id"], result=result, is_error=failed)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    # Only a finished turn joins the history (an interrupted one leaves no trace).
    store.parent.mkdir(parents=True, exist_ok=True)
    partial = store.with_suffix(".tmp")
    partial.write_text(json.dumps(messages))
    partial.replace(store)
    out(type="result", session_id=session, model=MODEL)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Figures for docs/web.md, measured on this machine (not a test):

    .venv/bin/python tests/ingress/web/measure_web.py

- **stream latency**: a message edited on the ``WebPlatform`` -> the ``put`` event read by a
  client of the live stream over real HTTP (hypercorn on 127.0.0.1), for 300 edits 20 ms
  apart: median and p99;
- **memory**: ``WebPlatform`` views full to ``MAX_MESSAGES`` messages of 1 KiB each (plus
  their change lists), by tracemalloc over 20 threads, and that times ``MAX_THREADS / 20``
  for every view the platform keeps;
- **an edited message**: what one 12 KiB message edited 2,000 times leaves in memory;
- **timeline fold**: actions per second through ``build_timeline`` for a synthetic log of
  2,000 runs (each: a prompt, the agent's session, 20 text deltas, a tool call, the end).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import httpx
import trio

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from threadspindle.effects import web_platform as W  # noqa: E402
from threadspindle.effects.web_platform import WebPlatform  # noqa: E402
from threadspindle.ingress.web.app import WebChat  # noqa: E402
from threadspindle.ingress.web.host import serve_web  # noqa: E402
from threadspindle.ingress.web.security import own_path  # noqa: E402
from threadspindle.ingress.web.settings import WebSettings  # noqa: E402
from threadspindle.ingress.web.timeline import build_timeline  # noqa: E402
from threadspindle.runtime.core import actions as A  # noqa: E402
from threadspindle.runtime.core import agent_events as E  # noqa: E402
from threadspindle.runtime.core.model import Conversation, ThreadState  # noqa: E402

THREAD = "web:0"


class _Runtime:
    def __init__(self) -> None:
        self.state = ThreadState.new(THREAD).replace(
            conversation=Conversation(agent="echo", workdir="/")
        )

    async def post(self, action: A.Action, *, channel_id: str | None = None) -> object:
        raise AssertionError("nothing is posted here")

    def snapshot(self, thread_id: str) -> ThreadState | None:
        return self.state

    def snapshots(self) -> dict[str, ThreadState]:
        return {THREAD: self.state}


async def stream_latency(edits: int = 300) -> tuple[float, float]:
    platform = WebPlatform()
    settings = WebSettings(token="measure", port=0)
    chat = WebChat(settings, platform, _Runtime())  # type: ignore[arg-type]
    sent: dict[int, float] = {}
    delays: list[float] = []
    async with trio.open_nursery() as nursery:
        server = await nursery.start(serve_web, chat)
        message = await platform.send(THREAD, "start")
        pages = server.url + own_path(settings.token)  # where the pages and the cookie are
        async with httpx.AsyncClient(base_url=pages, timeout=30) as client:
            await client.get("/?token=measure")

            async def edit() -> None:
                for n in range(edits):
                    await trio.sleep(0.02)
                    await platform.edit(THREAD, message, f"text {n} " * 20)
                    sent[platform.view(THREAD).seq] = time.perf_counter()

            after = platform.view(THREAD).seq
            async with client.stream("GET", f"/t/{THREAD}/events?after={after}") as stream:
                nursery.start_soon(edit)
                event, seq = "", 0
                async for line in stream.aiter_lines():
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("id: "):
                        seq = int(line[4:])
                    elif line.startswith("data: ") and event == "put":
                        json.loads(line[6:])
                        delays.append(time.perf_counter() - sent.get(seq, time.perf_counter()))
                        if len(delays) >= edits:
                            break
        nursery.cancel_scope.cancel()
    delays.sort()
    return statistics.median(delays) * 1000, delays[int(len(delays) * 0.99) - 1] * 1000


def full_memory(threads: int = 20) -> tuple[float, float]:
    """MiB for ``threads`` full views, and for ``MAX_THREADS`` of them."""

    async def fill() -> WebPlatform:
        platform = WebPlatform()
        text = ("word " * 205)[:1023] + "\n"
        for t in range(threads):
            for _ in range(W.MAX_MESSAGES + 100):  # past the bound: the oldest went
                await platform.send(f"web:{t}", text)
        return platform

    tracemalloc.start()
    platform = trio.run(fill)
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(platform.view("web:0").messages()) == W.MAX_MESSAGES
    measured = current / 2**20
    return measured, measured * W.MAX_THREADS / threads


def edited_memory(edits: int = 2000) -> float:
    """KiB held after one 12 KiB message was edited ``edits`` times (changes name the
    message; no old version is kept)."""

    async def edit() -> WebPlatform:
        platform = WebPlatform()
        message = await platform.send(THREAD, "x")
        for n in range(edits):
            await platform.edit(THREAD, message, f"{n} " + "y" * 12 * 1024)
        return platform

    tracemalloc.start()
    platform = trio.run(edit)
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert platform.view(THREAD).seq == edits + 1
    return current / 1024


def timeline_rate(runs: int = 2000) -> tuple[int, float]:
    actions: list[A.Action] = []
    n = 0

    def act(cls: type, **fields: object) -> None:
        nonlocal n
        n += 1
        actions.append(cls(thread_id=THREAD, action_id=f"a{n}", at=float(n), **fields))

    act(A.PolicySet, policy={"allowed_roots": ["/"]})
    act(A.ConversationStarted, agent="echo", requested_workdir="/", resolved_workdir="/")
    act(A.AgentConnected)
    for r in range(1, runs + 1):
        run = f"r{r}"
        act(A.UserMessage, author_id="u", author_name="u", text=f"p{r}", interrupt=True)
        act(A.AgentEventReceived, run_id=run, event=E.SessionStarted(session_id="s"))
        for _ in range(20):
            act(A.AgentEventReceived, run_id=run, event=E.TextDelta(text="word "))
        act(
            A.AgentEventReceived,
            run_id=run,
            event=E.ToolStarted(tool_id="t", name="Bash", display_name="Bash"),
        )
        act(A.AgentEventReceived, run_id=run, event=E.ToolFinished(tool_id="t", result="ok"))
        act(A.AgentEventReceived, run_id=run, event=E.TurnCompleted(session_id="s"))
    started = time.perf_counter()
    timeline = build_timeline(actions)
    elapsed = time.perf_counter() - started
    assert len(timeline.runs) == runs and all(r.outcome == "completed" for r in timeline.runs)
    return len(actions), len(actions) / elapsed


def main() -> None:
    median, p99 = trio.run(stream_latency)
    print(
        f"stream latency (edit -> put event read over HTTP): median {median:.2f} ms, "
        f"p99 {p99:.2f} ms"
    )
    twenty, every = full_memory()
    print(
        f"memory, 20 full threads ({W.MAX_MESSAGES} messages of 1 KiB each): "
        f"{twenty:.1f} MiB; all {W.MAX_THREADS} threads kept full: ~{every:.0f} MiB"
    )
    print(f"one 12 KiB message edited 2,000 times: {edited_memory():.0f} KiB held")
    count, rate = timeline_rate()
    print(f"timeline fold: {count} actions at {rate:,.0f} actions/s")


if __name__ == "__main__":
    main()

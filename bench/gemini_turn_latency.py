"""Gemini CLI adapter latency: long-lived ``--acp`` process vs one ``-p`` process per turn.

Drives the genuine CLI (``.agents``) against the fake Gemini server on 127.0.0.1 and
measures, for turns 2..N of one conversation, the time from ``prompt()`` to the first event,
to the first text delta and to the turn's end; then, on a slow stream, the time from
``interrupt()`` to the turn's end. Run:

    .venv/bin/python -m bench.gemini_turn_latency [turns]
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

from threadspindle.agents.base import AgentOptions, StampedEvent
from threadspindle.agents.gemini import GeminiAdapter
from threadspindle.runtime.core.agent_events import TextDelta, TurnAborted, TurnCompleted
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent
from threadspindle.testkit.fake_model.gemini import FakeGeminiServer

GEMINI = Path(__file__).resolve().parents[1] / ".agents" / "node_modules" / ".bin" / "gemini"
INTERRUPTS = 3


async def measure(
    per_turn: bool, turns: int, base_url: str
) -> tuple[list[tuple[float, float, float]], list[float]]:
    tmp = Path(tempfile.mkdtemp(prefix="spindle-bench-gemini-"))
    (tmp / "home" / ".gemini").mkdir(parents=True)
    (tmp / "home" / ".gemini" / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    )
    (tmp / "work").mkdir()
    options = AgentOptions(
        binary=str(GEMINI),
        home=str(tmp / "home"),
        per_turn=per_turn,
        env=(("GOOGLE_GEMINI_BASE_URL", base_url), ("GEMINI_API_KEY", "fake")),
    )
    adapter = GeminiAdapter(options)
    marks: dict[str, float] = {}
    done = trio.Event()
    text_seen = trio.Event()

    async def emit(stamped: StampedEvent) -> None:
        now = time.perf_counter()
        marks.setdefault("first", now)
        if isinstance(stamped.event, TextDelta):
            marks.setdefault("text", now)
            text_seen.set()
        if isinstance(stamped.event, TurnCompleted | TurnAborted):
            marks["end"] = now
            done.set()

    async def turn(run_id: str, text: str) -> float:
        nonlocal done, text_seen
        marks.clear()
        done, text_seen = trio.Event(), trio.Event()
        sent = time.perf_counter()
        prompt = PromptAgent(run_id=run_id, text=text, agent="gemini", workdir=str(tmp / "work"))
        await adapter.prompt(prompt)
        return sent

    samples: list[tuple[float, float, float]] = []
    interrupts: list[float] = []
    start = StartAgent(agent="gemini", workdir=str(tmp / "work"))
    async with trio.open_nursery() as nursery:
        await nursery.start(adapter.serve, start, emit)
        for n in range(1, turns + 1):
            sent = await turn(f"r{n}", "hello")
            with trio.fail_after(60):
                await done.wait()
            if n > 1:  # turn 1 pays the start-up in both modes
                samples.append(
                    (marks["first"] - sent, marks.get("text", sent) - sent, marks["end"] - sent)
                )
        for i in range(INTERRUPTS):
            await turn(f"s{i}", "SLOWTEST")
            with trio.fail_after(60):
                await text_seen.wait()
            asked = time.perf_counter()
            await adapter.interrupt(f"s{i}")
            with trio.fail_after(30):
                await done.wait()
            interrupts.append(marks["end"] - asked)
        await adapter.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    return samples, interrupts


def _row(name: str, samples: list[tuple[float, float, float]], interrupts: list[float]) -> str:
    med = [statistics.median(s[i] for s in samples) * 1000 for i in range(3)]
    stop = statistics.median(interrupts) * 1000
    return (
        f"{name:<22} {med[0]:>10.0f} {med[1]:>12.0f} {med[2]:>10.0f} {stop:>16.0f}"
        f"   (n={len(samples)}, {len(interrupts)} interrupts)"
    )


async def main(turns: int) -> None:
    server = FakeGeminiServer(slow_delay=0.2)
    base_url = server.start()
    try:
        long_lived = await measure(False, turns, base_url)
        per_turn = await measure(True, turns, base_url)
    finally:
        server.stop()
    print("median ms from prompt() to:  first event   first text   turn end   interrupt->end")
    print(_row("long-lived (--acp)", *long_lived))
    print(_row("process per turn (-p)", *per_turn))


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 6)

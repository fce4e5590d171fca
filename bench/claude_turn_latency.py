"""Claude Code adapter latency: long-lived stream-json process vs one process per turn.

Drives the genuine CLI (``.agents``) against the fake Anthropic server on 127.0.0.1 and
measures, for turns 2..N of one conversation, the time from ``prompt()`` to the first event,
to the first text delta and to the turn's end; then, on a slow stream, the time from
``interrupt()`` to the turn's end. "Spindle overhead" is our prompt->turn end minus the
CLI's own ``duration_ms`` for the turn (stdin write, stdout read, parse, stamp, emit). Run:

    .venv/bin/python -m bench.claude_turn_latency [turns]

``run(quick)`` returns the same numbers for ``python -m bench``.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import trio

from threadspindle.agents.base import AgentOptions, StampedEvent
from threadspindle.agents.claude import ClaudeAdapter
from threadspindle.runtime.core.agent_events import TextDelta, TurnAborted, TurnCompleted
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent
from threadspindle.testkit.fake_model.anthropic import FakeAnthropic

__all__ = ["Measured", "measure", "run"]

CLAUDE = Path(__file__).resolve().parents[1] / ".agents" / "node_modules" / ".bin" / "claude"


@dataclass
class Measured:
    turns: list[tuple[float, float, float]] = field(default_factory=list)  # s: first, text, end
    overhead: list[float] = field(default_factory=list)  # s: our turn time - the CLI's
    interrupts: list[float] = field(default_factory=list)  # s: interrupt() -> turn end
    processes: int = 0

    def median_ms(self, values: list[float]) -> float | None:
        return round(statistics.median(values) * 1000, 1) if values else None


async def measure(per_turn: bool, turns: int, interrupts: int, base_url: str) -> Measured:
    tmp = Path(tempfile.mkdtemp(prefix="spindle-bench-claude-"))
    (tmp / "home").mkdir()
    (tmp / "work").mkdir()
    options = AgentOptions(
        binary=str(CLAUDE),
        home=str(tmp / "home"),
        per_turn=per_turn,
        env=(("ANTHROPIC_BASE_URL", base_url), ("ANTHROPIC_API_KEY", "sk-ant-fake")),
    )
    adapter = ClaudeAdapter(options)
    marks: dict[str, float] = {}
    ended: list[TurnCompleted | TurnAborted] = []
    done, text_seen = trio.Event(), trio.Event()

    async def emit(stamped: StampedEvent) -> None:
        now = time.perf_counter()
        marks.setdefault("first", now)
        if isinstance(stamped.event, TextDelta):
            marks.setdefault("text", now)
            text_seen.set()
        if isinstance(stamped.event, TurnCompleted | TurnAborted):
            marks["end"] = now
            ended.append(stamped.event)
            done.set()

    async def turn(run_id: str, text: str) -> float:
        nonlocal done, text_seen
        marks.clear()
        done, text_seen = trio.Event(), trio.Event()
        sent = time.perf_counter()
        work = str(tmp / "work")
        await adapter.prompt(PromptAgent(run_id=run_id, text=text, agent="claude", workdir=work))
        return sent

    result = Measured()
    try:
        async with trio.open_nursery() as nursery:
            start = StartAgent(agent="claude", workdir=str(tmp / "work"))
            await nursery.start(adapter.serve, start, emit)
            for n in range(1, turns + 1):
                sent = await turn(f"r{n}", "hello")
                with trio.fail_after(60):
                    await done.wait()
                if n == 1:
                    continue  # turn 1 pays the start-up in both modes
                first, text, end = marks["first"], marks.get("text", sent), marks["end"]
                result.turns.append((first - sent, text - sent, end - sent))
                last = ended[-1]
                if isinstance(last, TurnCompleted) and last.duration_ms is not None:
                    result.overhead.append(max(0.0, end - sent - last.duration_ms / 1000))
            for i in range(interrupts):
                await turn(f"s{i}", "SLOWTEST")
                with trio.fail_after(60):
                    await text_seen.wait()
                asked = time.perf_counter()
                await adapter.interrupt(f"s{i}")
                with trio.fail_after(30):
                    await done.wait()
                result.interrupts.append(marks["end"] - asked)
            await adapter.stop()
        result.processes = adapter.processes_started
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


async def _both(turns: int, interrupts: int) -> tuple[Measured, Measured]:
    server = FakeAnthropic(slow_delay=0.2)
    base_url = server.start()
    try:
        long_lived = await measure(False, turns, interrupts, base_url)
        per_turn = await measure(True, turns, interrupts, base_url)
    finally:
        server.stop()
    return long_lived, per_turn


def run(quick: bool = False) -> dict[str, float | int | str | None]:
    """The numbers ``python -m bench`` reports for Claude Code."""
    long_lived, per_turn = trio.run(_both, 3 if quick else 11, 1 if quick else 3)
    warm = long_lived.median_ms([t[0] for t in long_lived.turns])
    cold = per_turn.median_ms([t[0] for t in per_turn.turns])
    return {
        "long_lived_first_event_ms": warm,
        "per_turn_first_event_ms": cold,
        "ratio": round(cold / warm, 1) if warm and cold else None,
        "long_lived_first_text_ms": long_lived.median_ms([t[1] for t in long_lived.turns]),
        "per_turn_first_text_ms": per_turn.median_ms([t[1] for t in per_turn.turns]),
        "long_lived_turn_end_ms": long_lived.median_ms([t[2] for t in long_lived.turns]),
        "per_turn_turn_end_ms": per_turn.median_ms([t[2] for t in per_turn.turns]),
        "interrupt_to_end_ms": long_lived.median_ms(long_lived.interrupts),
        "per_turn_interrupt_to_end_ms": per_turn.median_ms(per_turn.interrupts),
        "spindle_overhead_ms": long_lived.median_ms(long_lived.overhead),
        "turns_measured": len(long_lived.turns),
        "command": "python -m bench.claude_turn_latency",
    }


def _row(name: str, m: Measured) -> str:
    cols = [m.median_ms([t[i] for t in m.turns]) for i in range(3)]
    cols += [m.median_ms(m.interrupts), m.median_ms(m.overhead)]
    cells = " ".join(f"{c if c is not None else '-':>12}" for c in cols)
    return f"{name:<24}{cells}   (n={len(m.turns)}, processes={m.processes})"


def main(turns: int) -> None:
    long_lived, per_turn = trio.run(_both, turns, 3)
    print("median ms from prompt() to:   first event   first text     turn end")
    print(" " * 24 + "(then: interrupt()->turn end, Spindle overhead)")
    print(_row("long-lived (stream-json)", long_lived))
    print(_row("process per turn", per_turn))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 11)

"""Second-turn latency of the Claude Code adapter: long-lived process vs one process per turn.

Drives the genuine CLI (``.agents``) against the fake Anthropic server on 127.0.0.1 and
measures, for turns 2..N of one conversation, the time from ``prompt()`` to the first event,
to the first text delta and to the turn's end. Run:

    .venv/bin/python -m bench.claude_turn_latency [turns]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

from ingress.agents.base import AgentOptions, StampedEvent
from ingress.agents.claude import ClaudeAdapter
from runtime.agent_events import TextDelta, TurnAborted, TurnCompleted
from runtime.effects import PromptAgent, StartAgent
from testkit.fake_model.anthropic import FakeAnthropic

CLAUDE = Path(__file__).resolve().parents[1] / ".agents" / "node_modules" / ".bin" / "claude"


async def measure(per_turn: bool, turns: int, base_url: str) -> list[tuple[float, float, float]]:
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
    done = trio.Event()

    async def emit(stamped: StampedEvent) -> None:
        nonlocal done
        now = time.perf_counter()
        marks.setdefault("first", now)
        if isinstance(stamped.event, TextDelta):
            marks.setdefault("text", now)
        if isinstance(stamped.event, TurnCompleted | TurnAborted):
            marks["end"] = now
            done.set()

    samples: list[tuple[float, float, float]] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(
            adapter.serve, StartAgent(agent="claude", workdir=str(tmp / "work")), emit
        )
        for n in range(1, turns + 1):
            marks.clear()
            done = trio.Event()
            sent = time.perf_counter()
            prompt = PromptAgent(
                run_id=f"r{n}", text="hello", agent="claude", workdir=str(tmp / "work")
            )
            await adapter.prompt(prompt)
            with trio.fail_after(60):
                await done.wait()
            if n > 1:  # turn 1 pays the start-up in both modes
                samples.append(
                    (marks["first"] - sent, marks.get("text", sent) - sent, marks["end"] - sent)
                )
        await adapter.stop()
    return samples


def _row(name: str, samples: list[tuple[float, float, float]]) -> str:
    med = [statistics.median(s[i] for s in samples) * 1000 for i in range(3)]
    return f"{name:<22} {med[0]:>10.0f} {med[1]:>12.0f} {med[2]:>10.0f}   (n={len(samples)})"


async def main(turns: int) -> None:
    server = FakeAnthropic()
    base_url = server.start()
    try:
        long_lived = await measure(False, turns, base_url)
        per_turn = await measure(True, turns, base_url)
    finally:
        server.stop()
    print("median ms from prompt() to:  first event   first text   turn end")
    print(_row("long-lived process", long_lived))
    print(_row("process per turn", per_turn))


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 6)

"""Latency of the Codex adapter with the genuine CLI and the local fake: a measurement script,
not a test (speed is measured, not asserted; it defines no test functions).

    .venv/bin/python tests/agents/test_codex_latency.py [rounds]

Prints, as JSON, the median and max over ``rounds`` of: a follow-up turn's prompt -> first
event / first text / turn end in the long-lived mode (``codex app-server``, process warm)
and per turn (``codex exec resume``, a process per turn); and interrupt -> turn end in both.
``measure`` is importable for ``bench/``.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from threadspindle.agents.base import AgentOptions, StampedEvent  # noqa: E402
from threadspindle.agents.codex import CodexAdapter  # noqa: E402
from threadspindle.runtime.core.agent_events import (  # noqa: E402
    SessionStarted,
    TextDelta,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent  # noqa: E402
from threadspindle.testkit.fake_model.openai_responses import OpenAIResponsesFake  # noqa: E402

CODEX = ROOT / ".agents" / "node_modules" / ".bin" / "codex"


def _options(base_url: str, home: str, per_turn: bool) -> AgentOptions:
    provider = (
        f'{{name="Fake",base_url="{base_url}",wire_api="responses",env_key="FAKE_API_KEY",'
        "request_max_retries=0,stream_max_retries=0}"
    )
    extra = (
        "-c", "model=gpt-5.5", "-c", "model_provider=fake",
        "-c", f"model_providers.fake={provider}",
        "-c", "features.plugins=false", "-c", "features.remote_plugin=false",
        "-c", "features.apps=false", "-c", "analytics.enabled=false",
    )  # fmt: skip
    return AgentOptions(
        binary=str(CODEX),
        extra_args=extra,
        env=(("FAKE_API_KEY", "sk-fake"),),
        home=home,
        per_turn=per_turn,
        stop_grace_s=2.0,
    )


class _Clock:
    """Arrival times of the events of each run."""

    def __init__(self) -> None:
        self.events: list[tuple[float, StampedEvent]] = []

    async def emit(self, stamped: StampedEvent) -> None:
        self.events.append((time.perf_counter(), stamped))

    def first(self, run_id: str, kinds: tuple[type, ...] | None = None) -> float | None:
        for t, s in self.events:
            if s.run_id == run_id and (kinds is None or isinstance(s.event, kinds)):
                return t
        return None

    async def wait(self, run_id: str, kinds: tuple[type, ...], count: int = 1) -> float:
        with trio.fail_after(60):
            while True:
                hits = [
                    t for t, s in self.events if s.run_id == run_id and isinstance(s.event, kinds)
                ]
                if len(hits) >= count:
                    return hits[count - 1]
                await trio.sleep(0.001)


def _summary(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {"median_ms": round(statistics.median(ms), 1), "max_ms": round(max(ms), 1)}


async def _mode(base_url: str, per_turn: bool, rounds: int) -> dict[str, Any]:
    work = tempfile.mkdtemp(prefix="codex-lat-work-")
    home = tempfile.mkdtemp(prefix="codex-lat-home-")
    adapter = CodexAdapter(_options(base_url, home, per_turn))
    clock = _Clock()
    first_event, first_text, turn_end, interrupt_end = [], [], [], []
    ends = (TurnCompleted, TurnAborted)
    async with trio.open_nursery() as nursery:
        await nursery.start(adapter.serve, StartAgent(agent="codex", workdir=work), clock.emit)

        async def turn(run_id: str, text: str) -> float:
            t0 = time.perf_counter()
            await adapter.prompt(PromptAgent(run_id=run_id, text=text, agent="codex", workdir=work))
            return t0

        t0 = await turn("warm", "hello")  # the first turn also starts the thread
        await clock.wait("warm", ends)
        for n in range(rounds):
            rid = f"t{n}"
            t0 = await turn(rid, "hello again")
            end = await clock.wait(rid, ends)
            first_event.append((clock.first(rid) or end) - t0)
            first_text.append((clock.first(rid, (TextDelta,)) or end) - t0)
            turn_end.append(end - t0)
        for n in range(rounds):
            rid = f"i{n}"
            await turn(rid, "SLOWTEST")
            if per_turn:  # codex exec does not stream text: wait for its thread, then a bit
                await clock.wait(rid, (SessionStarted,))
                await trio.sleep(0.3)
            else:
                await clock.wait(rid, (TextDelta,), count=2)
            t_int = time.perf_counter()
            await adapter.interrupt(rid)
            interrupt_end.append(await clock.wait(rid, ends) - t_int)
        await adapter.stop()
        nursery.cancel_scope.cancel()
    return {
        "prompt_to_first_event": _summary(first_event),
        "prompt_to_first_text": _summary(first_text),
        "prompt_to_turn_end": _summary(turn_end),
        "interrupt_to_turn_end": _summary(interrupt_end),
    }


async def measure(rounds: int = 5) -> dict[str, Any]:
    fake = OpenAIResponsesFake(slow_delay=0.1, slow_chunks=40)
    base_url = fake.start()
    try:
        return {
            "rounds": rounds,
            "long_lived_app_server": await _mode(base_url, per_turn=False, rounds=rounds),
            "per_turn_exec_resume": await _mode(base_url, per_turn=True, rounds=rounds),
        }
    finally:
        fake.stop()


if __name__ == "__main__":
    print(json.dumps(trio.run(measure, int(sys.argv[1]) if len(sys.argv) > 1 else 5), indent=2))

"""Measure the opencode adapter against the genuine CLI and the fake model: second-turn
latency (prompt -> first event, -> first text, -> turn end) in long-lived mode (``opencode
serve``) vs one process per turn (``opencode run``), and interrupt -> turn end.

Run: ``.venv/bin/python -m bench.opencode_latency [--turns 5]`` (needs
``make agents``). Everything runs on 127.0.0.1 in a temporary HOME; prints a table (ms).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trio

from threadspindle.agents.base import AgentOptions, StampedEvent
from threadspindle.agents.opencode import OpencodeAdapter
from threadspindle.runtime.core.agent_events import TextDelta, TurnAborted, TurnCompleted
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent
from threadspindle.testkit.fake_model.openai_chat import OpenAIChatFake

ROOT = Path(__file__).resolve().parents[2]
OPENCODE = ROOT / ".agents" / "node_modules" / ".bin" / "opencode"
OFFLINE_ENV = tuple(
    (f"OPENCODE_DISABLE_{name}", "1")
    for name in (
        "AUTOUPDATE",
        "MODELS_FETCH",
        "LSP_DOWNLOAD",
        "SHARE",
        "DEFAULT_PLUGINS",
        "CLAUDE_CODE",
    )
)


def fake_home(home: Path, base_url: str) -> None:
    config = {
        "model": "fake/fake-model",
        "small_model": "fake/fake-model",
        "autoupdate": False,
        "share": "disabled",
        "provider": {
            "fake": {
                "npm": "@ai-sdk/openai-compatible",
                "options": {"baseURL": base_url, "apiKey": "sk-fake"},
                "models": {
                    "fake-model": {"tool_call": True, "limit": {"context": 128000, "output": 4096}}
                },
            }
        },
    }
    (home / ".config" / "opencode").mkdir(parents=True, exist_ok=True)
    (home / ".config" / "opencode" / "opencode.json").write_text(json.dumps(config))


class Probe:
    def __init__(self) -> None:
        self.events: list[tuple[float, StampedEvent]] = []

    async def emit(self, event: StampedEvent) -> None:
        self.events.append((time.monotonic(), event))

    async def first(
        self, run_id: str, match: Callable[[StampedEvent], bool], timeout: float = 60
    ) -> float:
        with trio.fail_after(timeout):
            while True:
                for at, event in self.events:
                    if event.run_id == run_id and match(event):
                        return at
                await trio.sleep(0.002)


def _ends(event: StampedEvent) -> bool:
    return isinstance(event.event, TurnCompleted | TurnAborted)


async def measure(mode: str, turns: int, work: Path, home: Path) -> dict[str, list[float]]:
    options = AgentOptions(
        binary=str(OPENCODE), home=str(home), env=OFFLINE_ENV, per_turn=(mode == "per-turn")
    )
    adapter = OpencodeAdapter(options)
    probe = Probe()
    out: dict[str, list[float]] = {"first_event": [], "first_text": [], "turn_end": []}
    out["interrupt_to_end"] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(
            adapter.serve, StartAgent(agent="opencode", workdir=str(work)), probe.emit
        )

        async def turn(run_id: str, text: str) -> float:
            t0 = time.monotonic()
            await adapter.prompt(
                PromptAgent(run_id=run_id, text=text, agent="opencode", workdir=str(work))
            )
            return t0

        t0 = await turn("warm", "hello")  # first turn: provider load, title call
        await probe.first("warm", _ends)
        for i in range(turns):
            run_id = f"r{i}"
            t0 = await turn(run_id, "hello")
            out["first_event"].append(await probe.first(run_id, lambda e: True) - t0)
            text = await probe.first(run_id, lambda e: isinstance(e.event, TextDelta))
            out["first_text"].append(text - t0)
            out["turn_end"].append(await probe.first(run_id, _ends) - t0)
        for i in range(max(1, turns // 2)):
            run_id = f"slow{i}"
            await turn(run_id, "SLOWTEST")
            await probe.first(run_id, lambda e: isinstance(e.event, TextDelta))
            t1 = time.monotonic()
            await adapter.interrupt(run_id)
            out["interrupt_to_end"].append(await probe.first(run_id, _ends) - t1)
        await adapter.stop()
        nursery.cancel_scope.cancel()
    return out


def _fmt(values: list[float]) -> str:
    if not values:
        return "-"
    ms = [v * 1000 for v in values]
    return f"{statistics.median(ms):7.0f} (min {min(ms):.0f}, max {max(ms):.0f})"


async def main(turns: int) -> None:
    fake = OpenAIChatFake(slow_delay=0.5, slow_chunks=40)
    fake.start()
    try:
        with tempfile.TemporaryDirectory(prefix="spindle-oc-bench-") as tmp:
            rows = {}
            for mode in ("long-lived", "per-turn"):
                work, home = Path(tmp) / mode / "work", Path(tmp) / mode / "home"
                work.mkdir(parents=True)
                fake_home(home, fake.base_url)
                rows[mode] = await measure(mode, turns, work, home)
    finally:
        fake.stop()
    print(f"opencode adapter latency, {turns} warm turns per mode, ms: median (min, max)")
    header = f"{'mode':<11} {'first event':>28} {'first text':>28} {'turn end':>28}"
    print(header + f" {'interrupt->end':>28}")
    for mode, row in rows.items():
        print(
            f"{mode:<11} {_fmt(row['first_event']):>28} {_fmt(row['first_text']):>28} "
            f"{_fmt(row['turn_end']):>28} {_fmt(row['interrupt_to_end']):>28}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=5)
    trio.run(main, parser.parse_args().turns)

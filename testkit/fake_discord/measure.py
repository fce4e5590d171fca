"""Counts the REST calls the bot makes per run, against the fake Discord:

    .venv/bin/python -m threadspindle.testkit.fake_discord.measure

For each scenario (a plain answer, the ~6000-character answer, a tool-heavy run, a burst
of 20 deltas a second) it runs one prompt through the whole stack (discord.py, runtime,
renderer, fake agent) and prints the calls made between the user's message and the
run's end, by method and route. Nothing here asserts: the tests do.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections import Counter
from pathlib import Path

import trio

from threadspindle.testkit.fake_discord.harness import fake_world
from threadspindle.testkit.fake_discord.stack import discord_stack

__all__ = ["main", "measure"]

SCENARIOS = {
    "plain answer": "hello",
    "long answer (~6000 chars, code blocks)": "LONG answer",
    "long answer streamed (12 pieces, 0.25 s apart)": "LONG STREAMED answer",
    "tool-heavy (3 tools, text between)": "TOOLS",
    "tool-heavy, 1 s tool steps": "TOOLS WAITING",
    "burst (60 deltas at 20/s)": "BURST",
}


def _route(path: str) -> str:
    return re.sub(r"\d{6,}", "{id}", path)


async def measure(prompt: str, *, discord_limits: bool = False) -> tuple[Counter[str], int, float]:
    """(calls by "METHOD route", messages shown, seconds) for one run of ``prompt``;
    ``discord_limits``: under Discord's message buckets (5 sends, 5 edits per 5 s per
    channel), with the X-RateLimit-* headers discord.py paces itself by."""
    with tempfile.TemporaryDirectory() as tmp, fake_world(tmp) as world:
        async with discord_stack(world, Path(tmp)) as stack:
            thread = await stack.start_thread()
            await trio.sleep(0.3)  # let the start command's reply settle
            if discord_limits:
                world.fake.rate_limit(5, 5.0, method="POST", path_contains="/messages")
                world.fake.rate_limit(5, 5.0, method="PATCH", path_contains="/messages")
            before = len(world.fake.rest_calls())
            started = time.monotonic()
            world.fake.send_message(thread, world.alice, prompt)
            messages = await stack.until_footers(thread, 1, timeout=60)
            await trio.sleep(0.6)  # a late paced edit would count too
            elapsed = time.monotonic() - started
            calls = world.fake.rest_calls()[before:]
            counts = Counter(f"{c.method} {_route(c.path)}" for c in calls)
            return counts, len(messages) - 1, elapsed


async def _main() -> None:
    runs = [(name, prompt, False) for name, prompt in SCENARIOS.items()]
    runs += [
        (f"{name}, under Discord's 5/5 s buckets", prompt, True)
        for name, prompt in list(SCENARIOS.items())[1:5]
    ]
    for name, prompt, limited in runs:
        counts, shown, elapsed = await measure(prompt, discord_limits=limited)
        total = sum(counts.values())
        print(f"{name}: {total} REST calls, {shown} bot messages, {elapsed:.1f} s")
        for route, n in sorted(counts.items()):
            print(f"    {n:4d}  {route}")


def main() -> None:
    trio.run(_main)


if __name__ == "__main__":
    main()

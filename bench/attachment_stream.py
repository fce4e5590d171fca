"""``python -m bench.attachment_stream [MIB]``: what a big attachment costs the bot.

The real discord.py client against the fake Discord (which makes the file's bytes while it
serves them, so only the bot holds any), one thread, one message with a ``MIB`` MiB
attachment (300 by default) under a cap above it. Meanwhile a trio task sleeps 10 ms in a
loop and records how late it wakes: the worst lateness is how long the event loop (every
other thread's actor, reactor and renderer) was held up. Printed as JSON: seconds to save,
MiB/s, the worst and the 99th-percentile loop lateness, and the growth of the process's
peak RSS (``ru_maxrss``) over the run.
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time

import trio

from bench.common import percentile
from threadspindle.testkit.fake_discord import GeneratedBytes
from threadspindle.testkit.fake_discord.harness import (
    SinkRuntime,
    fake_world,
    running_bot,
    wait_for,
)

MIB = 1024 * 1024


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


async def measure(size_mib: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp, fake_world(tmp) as world:
        runtime = SinkRuntime()
        overrides = {"attachment_max_bytes": (size_mib + 1) * MIB}
        async with running_bot(world, runtime, **overrides):
            world.fake.run_command(world.channel, world.alice, "claude start", workdir=tmp)
            started = await wait_for(lambda: runtime.of_kind("conversation_started"))
            thread = int(started[-1].thread_id)
            lateness: list[float] = []
            done = trio.Event()

            async def watch_the_loop() -> None:
                while not done.is_set():
                    before = trio.current_time()
                    await trio.sleep(0.01)
                    lateness.append(trio.current_time() - before - 0.01)

            peak_before = _peak_rss_mib()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch_the_loop)
                began = time.perf_counter()
                world.fake.send_message(
                    thread,
                    world.alice,
                    "big file",
                    attachments=(("big.bin", GeneratedBytes(size_mib * MIB), None),),
                )
                await wait_for(lambda: runtime.of_kind("user_message"), timeout=600)
                seconds = time.perf_counter() - began
                done.set()
            return {
                "size_mib": size_mib,
                "seconds": round(seconds, 2),
                "mib_per_s": round(size_mib / seconds, 1),
                "loop_lateness_max_ms": round(max(lateness) * 1000, 1),
                "loop_lateness_p99_ms": round(percentile(lateness, 99) * 1000, 1),
                "peak_rss_growth_mib": round(_peak_rss_mib() - peak_before, 1),
            }


def main(argv: list[str]) -> int:
    size = int(argv[0]) if argv else 300
    print(json.dumps(trio.run(measure, size), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Measure the live runtime (not a test; ``make bench`` owns the published numbers):

1. actions/s through one thread actor with the durable SQLite log, reactor and a
   recording renderer (agent text deltas of one running turn: each commits one action,
   swaps the state and applies one AppendOutput after its action is durable);
2. start-up time to rebuild the store from a 100k-action log, with the default snapshots
   and with none (the whole fold).

    .venv/bin/python tests/runtime/measure_runtime.py [N_ACTIONS]

The collector is tuned as ``run_app`` tunes it (``runtime.live.tuning.tune_gc``); prefix
``SPINDLE_GC=default`` to measure with CPython's default thresholds.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from threadspindle.runtime.core import actions as A  # noqa: E402
from threadspindle.runtime.core import agent_events as E  # noqa: E402
from threadspindle.runtime.core.model import Policy, ThreadState  # noqa: E402
from threadspindle.runtime.core.transitions import transition  # noqa: E402
from threadspindle.runtime.live.log import EventLog  # noqa: E402
from threadspindle.runtime.live.registry import open_runtime  # noqa: E402
from threadspindle.runtime.live.store import rebuild_from_log  # noqa: E402
from threadspindle.runtime.live.tuning import tune_gc  # noqa: E402
from threadspindle.testkit.fake_agent import FakeAgentWorld, Step  # noqa: E402
from threadspindle.testkit.fake_chat import RenderWorld  # noqa: E402


def silent(text: str) -> list[Step]:
    return [Step("sleep", seconds=10_000)]


async def throughput(tmp: Path, n: int, in_thread: bool) -> tuple[float, dict[str, int]]:
    agents, chat = FakeAgentWorld(script=silent), RenderWorld()
    with EventLog(tmp / f"bench-{in_thread}.sqlite3", flush_in_thread=in_thread) as log:
        async with open_runtime(
            log=log,
            renderer_factory=chat.renderer,
            adapter_factory=agents.factory,
            policy=Policy(allowed_roots=(str(tmp),)),
        ) as rt:
            base = {"thread_id": "t1", "at": time.time()}
            await rt.post(
                A.ConversationStarted(
                    **base,
                    action_id="c",
                    agent="fake",
                    requested_workdir=str(tmp),
                    resolved_workdir=str(tmp),
                )
            )
            receipt = await rt.post(A.UserMessage(**base, action_id="m", author_id="u", text="go"))
            await receipt.durable()
            while rt.snapshot("t1").run is None or rt.snapshot("t1").run.phase.value != "running":
                await rt.post(
                    A.AgentEventReceived(
                        **base,
                        action_id="s",
                        run_id="r1",
                        session_id=None,
                        event=E.SessionStarted(session_id="s1"),
                    )
                )
                await trio.sleep(0.01)
            await rt.wait_quiet("t1")
            t0 = time.perf_counter()
            last = None
            for i in range(n):
                last = await rt.post(
                    A.AgentEventReceived(
                        thread_id="t1",
                        action_id=f"e{i}",
                        at=time.time(),
                        run_id="r1",
                        session_id="s1",
                        event=E.TextDelta(text=f"w{i} "),
                    )
                )
            await last.durable()
            await rt.wait_quiet("t1")
            elapsed = time.perf_counter() - t0
            stats = log.statistics()
            await rt.dispose_all()
    return n / elapsed, stats


def build_log(path: Path, n: int, threads: int, snapshot_every: int) -> None:
    per = n // threads
    with EventLog(path, snapshot_every=snapshot_every) as log:
        for t in range(threads):
            tid = f"t{t}"
            state = ThreadState.new(tid)
            seq_actions: list[A.Action] = [
                A.PolicySet(
                    thread_id=tid, action_id="p", at=0.0, policy=Policy(allowed_roots=("/tmp",))
                ),
                A.ConversationStarted(
                    thread_id=tid,
                    action_id="c",
                    at=0.0,
                    agent="fake",
                    requested_workdir="/tmp",
                    resolved_workdir="/tmp",
                ),
            ]
            for i in range(per - len(seq_actions)):
                if i % 50 == 0:
                    seq_actions.append(
                        A.UserMessage(
                            thread_id=tid,
                            action_id=f"m{i}",
                            at=i,
                            author_id="u",
                            text=f"prompt {i}",
                        )
                    )
                    run = f"r{i // 50 + 1}"
                elif i % 50 == 49:
                    seq_actions.append(
                        A.AgentEventReceived(
                            thread_id=tid,
                            action_id=f"x{i}",
                            at=i,
                            run_id=run,
                            session_id=None,
                            event=E.TurnCompleted(session_id="s1"),
                        )
                    )
                else:
                    seq_actions.append(
                        A.AgentEventReceived(
                            thread_id=tid,
                            action_id=f"x{i}",
                            at=i,
                            run_id=run,
                            session_id=None,
                            event=E.TextDelta(text=f"word{i} "),
                        )
                    )
            for action in seq_actions:
                state = transition(state, action).state
                log.append(action, state)
            log.flush()


def rebuild_time(path: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    with EventLog(path) as log:
        _, folded = rebuild_from_log(log, transition)
    return time.perf_counter() - t0, folded


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    tune_gc()
    with tempfile.TemporaryDirectory() as tmp:
        for in_thread in (False, True):
            rate, stats = trio.run(throughput, Path(tmp), n, in_thread)
            where = "in a worker thread" if in_thread else "on the trio thread"
            print(
                f"throughput, log flushed {where}: {rate:,.0f} actions/s through one actor "
                f"({n} agent deltas; {stats.flushes} flushes for {stats.rows_written} "
                f"rows, {stats.flush_us / max(1, stats.flushes):.0f} µs per flush)"
            )
        for snapshot_every, label in ((1000, "snapshots every 1000"), (10**9, "no snapshots")):
            path = Path(tmp) / f"big-{snapshot_every}.sqlite3"
            t0 = time.perf_counter()
            build_log(path, 100_000, 8, snapshot_every)
            built = time.perf_counter() - t0
            seconds, folded = rebuild_time(path)
            print(
                f"rebuild 100k actions ({label}): {seconds:.2f} s, folded {folded} "
                f"(log written in {built:.1f} s, {path.stat().st_size / 1e6:.1f} MB)"
            )


if __name__ == "__main__":
    main()

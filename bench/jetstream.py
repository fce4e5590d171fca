"""The JetStream thread log against the SQLite one (issue 15), on real nats-servers on this
machine (file storage, ``sync_interval: always``):

- ``fenced_append``: one thread, each append awaited until durable (the cost one action
  pays): SQLite (WAL, synchronous=NORMAL, the default of ``spindle run``), JetStream on one
  node (R1) and on a 3-node cluster (R3), each append carrying the expected last subject
  sequence;
- ``actions_per_s``: many threads of one runner appending at once, each waiting for its
  action to be durable before the next (the log batches what waits together: one
  transaction, or one JetStream message per thread per flush round);
- ``takeover``: a holder of K threads dies (stops renewing, like a SIGKILLed runner); the
  time until another runner has claimed them all (lease TTL + reading each thread's log +
  its epoch record) and rebuilt their states;
- ``pipeline``: the whole path over JetStream with runner *processes* (``spindle runner``'s
  ``serve_runner`` and the fake agent): T threads, one prompt each sent at once through the
  gateway, each answered by 20 deltas in a second; prompt -> first output at the gateway
  p50/p99 and effects applied per second, with the threads on one runner and split over two
  runners (two roots);
- ``load``: ingress -> effect under load, as ``bench/latency.py`` measures it for one
  ``spindle run`` process: T threads (1,000) all streaming 20 deltas a second at once, on
  one runner process or split over two (two roots); each delta carries its emission time
  and the gateway notes when it first appears in an applied effect (p50/p99), how many of
  the emitted deltas reached the chat before a drain limit, and the effects applied per s;
- ``rebuild``: a thread of N actions with a snapshot every 1,000: claiming and rebuilding
  it (reads the snapshot and the tail after it), and reading the whole subject from the
  start (``spindle log export``; the ordered-consumer fast path).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import trio

from bench.common import percentile
from bench.core import realistic_actions
from threadspindle.effects.jetstream.connection import JetStream, open_jetstream
from threadspindle.effects.jetstream.gateway import Gateway
from threadspindle.effects.jetstream.log import JetStreamLog, export_rows, open_jetstream_log
from threadspindle.effects.jetstream.transport import open_transport
from threadspindle.runtime.core.actions import ConversationStarted, StatusRequested, UserMessage
from threadspindle.runtime.core.effect_types import Effect
from threadspindle.runtime.core.model import Policy, ThreadState
from threadspindle.runtime.core.transitions import transition
from threadspindle.runtime.live.log import EventLog
from threadspindle.runtime.live.ports import Posted, RendererPort, ThreadLog
from threadspindle.runtime.live.store import rebuild_from_log
from threadspindle.testkit.fake_chat import RenderWorld
from threadspindle.testkit.nats_cluster import NatsCluster

__all__ = ["load_only", "run"]

_STAMP = re.compile(r"@(\d+\.\d+)")


def _status(thread_id: str, n: int) -> StatusRequested:
    return StatusRequested(thread_id=thread_id, action_id=f"{thread_id}-{n}", at=float(n))


async def _sequential(log: ThreadLog, n: int) -> dict[str, float]:
    waits: list[float] = []
    started = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        await log.wait_durable(log.append(_status("seq", i)))
        waits.append(time.perf_counter() - t0)
    total = time.perf_counter() - started
    return {
        "appends": n,
        "per_s": round(n / total),
        "p50_ms": round(percentile(waits, 50) * 1000, 2),
        "p99_ms": round(percentile(waits, 99) * 1000, 2),
    }


async def _concurrent(log: ThreadLog, threads: int, seconds: float) -> dict[str, float]:
    done = 0
    waits: list[float] = []

    async def writer(thread_id: str, deadline: float) -> None:
        nonlocal done
        n = 0
        while time.perf_counter() < deadline:
            n += 1
            t0 = time.perf_counter()
            await log.wait_durable(log.append(_status(thread_id, n)))
            waits.append(time.perf_counter() - t0)
            done += 1

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i in range(threads):
            nursery.start_soon(writer, f"c{i}", started + seconds)
    total = time.perf_counter() - started
    return {
        "threads": threads,
        "actions": done,
        "per_s": round(done / total),
        "p50_ms": round(percentile(waits, 50) * 1000, 2),
        "p99_ms": round(percentile(waits, 99) * 1000, 2),
    }


async def _on_log(log: ThreadLog, fn: Any, *args: Any) -> dict[str, float]:
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run_flusher)
        result: dict[str, float] = await fn(log, *args)
        nursery.cancel_scope.cancel()
    return result


async def _js_appends(
    conn: JetStream, holder: str, sequential: int, threads: int, secs: float
) -> dict[str, Any]:
    out = {}
    async with open_jetstream_log(conn, holder) as log:
        await log.claim("seq")
        for i in range(threads):
            await log.claim(f"c{i}")
        out["fenced_append"] = await _on_log(log, _sequential, sequential)
        out["actions_per_s"] = await _on_log(log, _concurrent, threads, secs)
    return out


async def _sqlite_appends(tmp: Path, sequential: int, threads: int, secs: float) -> dict[str, Any]:
    with EventLog(tmp / "events.sqlite3") as log:
        return {
            "fenced_append": await _on_log(log, _sequential, sequential),
            "actions_per_s": await _on_log(log, _concurrent, threads, secs),
        }


async def _takeover(conn: JetStream, threads: int) -> dict[str, float]:
    """A holder of ``threads`` threads dies; another claims and rebuilds them all."""
    ids = [f"k{threads}-{i}" for i in range(threads)]
    dead = JetStreamLog(conn, f"dead-{threads}")
    async with trio.open_nursery() as nursery:
        await nursery.start(dead.leases.run_renewer)
        for thread_id in ids:
            await dead.claim(thread_id)
        await nursery.start(dead.run_flusher)
        for thread_id in ids:
            for n in range(20):
                ticket = dead.append(_status(thread_id, n))
        await dead.wait_durable(ticket)
        died = time.perf_counter()
        nursery.cancel_scope.cancel()  # no renewal, no flush: as after SIGKILL
    heir = JetStreamLog(conn, f"heir-{threads}")
    async with trio.open_nursery() as nursery:
        limiter = trio.CapacityLimiter(64)

        async def claim(thread_id: str) -> None:
            async with limiter:
                await heir.claim(thread_id)

        for thread_id in ids:
            nursery.start_soon(claim, thread_id)
    claimed = time.perf_counter()
    _, folded = rebuild_from_log(heir, transition)
    rebuilt = time.perf_counter()
    assert folded == 20 * threads, folded
    for thread_id in ids:
        await heir.release(thread_id)
    return {
        "threads": threads,
        "lease_ttl_s": conn.lease_ttl_s,
        "takeover_s": round(claimed - died, 3),
        "rebuild_s": round(rebuilt - claimed, 3),
        "total_s": round(rebuilt - died, 3),
    }


async def _rebuild(conn: JetStream, total: int) -> dict[str, float]:
    base = realistic_actions(total // 75 + 1)[:total]
    state = ThreadState.new("big", Policy(allowed_roots=("/work",), queue_limit=10_000))
    started = time.perf_counter()
    async with open_jetstream_log(conn, "writer", snapshot_every=1000) as log:
        await log.claim("big")
        async with trio.open_nursery() as nursery:
            await nursery.start(log.run_flusher)
            for i, action in enumerate(base):
                action = action.replace(thread_id="big")
                state = transition(state, action).state
                ticket = log.append(action, state)
                if i % 5000 == 4999:
                    await log.wait_durable(ticket)  # bounded memory while writing
            await log.wait_durable(ticket)
            nursery.cancel_scope.cancel()
        written = time.perf_counter() - started
        messages = log.messages
        await log.release("big")
    reader = JetStreamLog(conn, "reader")
    t0 = time.perf_counter()
    await reader.claim("big")
    store, folded = rebuild_from_log(reader, transition)
    with_snapshot = time.perf_counter() - t0
    assert store.get("big") == state
    await reader.release("big")
    t0 = time.perf_counter()
    rows = 0
    async for _ in export_rows(conn, "big"):
        rows += 1
    read_all = time.perf_counter() - t0
    assert rows == len(base)
    return {
        "actions": len(base),
        "messages": messages,
        "write_s": round(written, 2),
        "write_actions_per_s": round(len(base) / written),
        "claim_and_rebuild_with_snapshot_s": round(with_snapshot, 3),
        "tail_folded": folded,
        "read_whole_subject_s": round(read_all, 2),
        "read_actions_per_s": round(rows / read_all),
    }


class _Timed:
    """A recording renderer that notes when each thread's first output of a run arrives."""

    def __init__(self, inner: RendererPort, thread_id: str, seen: dict[str, list[float]]):
        self.inner, self.thread_id, self.seen = inner, thread_id, seen
        self.on_posted = None

    def known(self, key: str, message_ids: tuple[str, ...]) -> None:
        self.inner.known(key, message_ids)

    async def apply(self, effect: Effect) -> list[Posted]:
        self.seen.setdefault(self.thread_id, []).append(time.perf_counter())
        return await self.inner.apply(effect)

    async def aclose(self) -> list[Posted]:
        return await self.inner.aclose()


def _runner_child(urls: list[str], *args: str) -> subprocess.Popen[str]:
    """``bench._runner_child`` with ``args``: the servers' URLs on its command line without
    their user and password, which go in its environment (any local process reads a
    command line; ``spindle runner`` warns of a password in one)."""
    plain, user, password = [], None, None
    for url in urls:
        parts = urlsplit(url)
        user, password = parts.username or user, parts.password or password
        plain.append(urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])))
    env = dict(os.environ)
    if password is not None:
        env["SPINDLE_CLUSTER__USER"] = user or ""
        env["SPINDLE_CLUSTER__PASSWORD"] = password
    return subprocess.Popen(
        [sys.executable, "-m", "bench._runner_child", ",".join(plain), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        env=env,
    )


async def _pipeline(urls: list[str], tmp: Path, runners: int, threads: int) -> dict[str, Any]:
    roots = [tmp / f"pipe{runners}-root{i}" for i in range(runners)]
    procs = []
    for i, root in enumerate(roots):
        root.mkdir()
        procs.append(_runner_child(urls, f"p{runners}-{i}", str(root), "5"))
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = await trio.to_thread.run_sync(proc.stdout.readline)
            assert line.strip() == "ready", line
        world = RenderWorld()
        seen: dict[str, list[float]] = {}
        async with open_jetstream(urls, replicas=len(urls), lease_ttl_s=5) as conn:
            gateway = Gateway(
                conn, await open_transport(conn), lambda t: _Timed(world.renderer(t), t, seen)
            )
            async with trio.open_nursery() as nursery:
                await nursery.start(gateway.serve_effects)
                ids = [f"q{runners}-{i}" for i in range(threads)]
                for i, thread_id in enumerate(ids):
                    root = str(roots[i % runners])
                    await gateway.start(
                        root,
                        ConversationStarted(
                            thread_id=thread_id,
                            action_id=f"c-{thread_id}",
                            at=time.time(),
                            agent="fake",
                            requested_workdir=root,
                            resolved_workdir=root,
                        ),
                    )
                with trio.fail_after(120):
                    while len(seen) < threads:  # every conversation answered "Started"
                        await trio.sleep(0.1)
                started = {t: len(v) for t, v in seen.items()}
                sent: dict[str, float] = {}
                for thread_id in ids:
                    sent[thread_id] = time.perf_counter()
                    await gateway.send(
                        UserMessage(
                            thread_id=thread_id,
                            action_id=f"u-{thread_id}",
                            at=time.time(),
                            author_id="u",
                            text="go",
                        )
                    )
                quiet_since = time.perf_counter()
                total = sum(len(v) for v in seen.values())
                with trio.move_on_after(180):
                    while time.perf_counter() - quiet_since < 3:
                        await trio.sleep(0.2)
                        now_total = sum(len(v) for v in seen.values())
                        if now_total != total:
                            total, quiet_since = now_total, time.perf_counter()
                nursery.cancel_scope.cancel()
        firsts, effects, last = [], 0, 0.0
        for thread_id in ids:
            after = seen.get(thread_id, [])[started.get(thread_id, 0) :]
            effects += len(after)
            if after:
                firsts.append(after[0] - sent[thread_id])
                last = max(last, after[-1])
        window = last - min(sent.values())
        return {
            "runners": runners,
            "threads": threads,
            "answered": len(firsts),
            "first_output_p50_ms": round(percentile(firsts, 50) * 1000),
            "first_output_p99_ms": round(percentile(firsts, 99) * 1000),
            "effects": effects,
            "effects_per_s": round(effects / window) if window > 0 else 0,
            "duplicate_keys": len(world.duplicate_keys),
        }
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


class _Stamped:
    """A recording renderer that notes, per thread, when each stamped delta first shows up
    in an applied effect (an append, or the text of a post or an edit)."""

    def __init__(self, inner: RendererPort, thread_id: str, lat: list[float], seen: set[str]):
        self.inner, self.thread_id, self.lat, self.seen = inner, thread_id, lat, seen
        self.on_posted = None
        self.effects = 0

    def known(self, key: str, message_ids: tuple[str, ...]) -> None:
        self.inner.known(key, message_ids)

    async def apply(self, effect: Effect) -> list[Posted]:
        now = time.time()
        for stamp in _STAMP.findall(getattr(effect, "text", "") or ""):
            if (tag := f"{self.thread_id}@{stamp}") not in self.seen:
                self.seen.add(tag)
                self.lat.append(now - float(stamp))
        self.effects += 1
        return await self.inner.apply(effect)

    async def aclose(self) -> list[Posted]:
        return await self.inner.aclose()


async def _load(
    urls: list[str], tmp: Path, runners: int, threads: int, stream_s: float, drain_s: float
) -> dict[str, Any]:
    """``threads`` threads streaming 20 deltas/s for ``stream_s`` over ``runners`` runner
    processes; delta emission -> applied at the gateway."""
    roots = [tmp / f"load{runners}-root{i}" for i in range(runners)]
    procs = []
    for i, root in enumerate(roots):
        root.mkdir()
        procs.append(_runner_child(urls, f"l{runners}-{i}", str(root), "5", str(stream_s)))
    lat: list[float] = []
    seen: set[str] = set()
    renderers: list[_Stamped] = []

    def make(thread_id: str) -> _Stamped:
        r = _Stamped(RenderWorld().renderer(thread_id), thread_id, lat, seen)
        renderers.append(r)
        return r

    try:
        for proc in procs:
            assert proc.stdout is not None
            line = await trio.to_thread.run_sync(proc.stdout.readline)
            assert line.strip() == "ready", line
        async with open_jetstream(urls, replicas=len(urls), lease_ttl_s=5) as conn:
            gateway = Gateway(conn, await open_transport(conn), make)
            async with trio.open_nursery() as nursery:
                await nursery.start(gateway.serve_effects)
                ids = [f"L{runners}-{i}" for i in range(threads)]
                t0 = time.perf_counter()

                async def open_some(part: list[str]) -> None:
                    for i, thread_id in part:
                        root = str(roots[i % runners])
                        await gateway.start(
                            root,
                            ConversationStarted(
                                thread_id=thread_id,
                                action_id=f"c-{thread_id}",
                                at=time.time(),
                                agent="fake",
                                requested_workdir=root,
                                resolved_workdir=root,
                            ),
                        )
                        await gateway.send(
                            UserMessage(
                                thread_id=thread_id,
                                action_id=f"u-{thread_id}",
                                at=time.time(),
                                author_id="u",
                                text="go",
                            )
                        )

                indexed = list(enumerate(ids))
                async with trio.open_nursery() as senders:  # 16 senders, like many users
                    for k in range(16):
                        senders.start_soon(open_some, indexed[k::16])
                sent_s = time.perf_counter() - t0
                expected = threads * stream_s / 0.05
                start = time.perf_counter()
                with trio.move_on_after(stream_s + drain_s):
                    last, quiet_since = -1, time.perf_counter()
                    while time.perf_counter() - quiet_since < 3 or len(lat) < 1:
                        await trio.sleep(0.5)
                        if len(lat) != last:
                            last, quiet_since = len(lat), time.perf_counter()
                window = quiet_since - start  # up to the last delta that reached the chat
                nursery.cancel_scope.cancel()
        effects = sum(r.effects for r in renderers)
        return {
            "runners": runners,
            "threads": threads,
            "stream_s": stream_s,
            "open_and_prompt_s": round(sent_s, 1),
            "deltas_expected": round(expected),
            "deltas_reached_chat": len(lat),
            "delta_to_chat_p50_ms": round(percentile(lat, 50) * 1000) if lat else None,
            "delta_to_chat_p99_ms": round(percentile(lat, 99) * 1000) if lat else None,
            "effects": effects,
            "effects_per_s": round(effects / window) if window > 0 else 0,
        }
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


async def load_only(threads: int, stream_s: float, drain_s: float) -> list[dict[str, Any]]:
    """Only the ``load`` part (``python -m bench.jetstream --load [THREADS]``)."""
    with tempfile.TemporaryDirectory(prefix="spindle-bench-load-") as tmp_name:
        tmp = Path(tmp_name)
        with NatsCluster(tmp / "r3", size=3) as cluster:
            return [await _load(cluster.urls, tmp, n, threads, stream_s, drain_s) for n in (1, 2)]


async def _main(quick: bool) -> dict[str, Any]:
    sequential = 50 if quick else 400
    threads = 10 if quick else 100
    secs = 1.0 if quick else 4.0
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="spindle-bench-js-") as tmp_name:
        tmp = Path(tmp_name)
        results["sqlite"] = await _sqlite_appends(tmp, sequential, threads, secs)
        with NatsCluster(tmp / "r1", size=1) as single:
            async with open_jetstream(single.urls, replicas=1, lease_ttl_s=2) as conn:
                results["jetstream_r1"] = await _js_appends(conn, "r1", sequential, threads, secs)
        with NatsCluster(tmp / "r3", size=3) as cluster:
            async with open_jetstream(cluster.urls, replicas=3, lease_ttl_s=2) as conn:
                results["jetstream_r3"] = await _js_appends(conn, "r3", sequential, threads, secs)
                results["takeover"] = [
                    await _takeover(conn, k) for k in ((1, 10) if quick else (1, 100))
                ]
                results["rebuild"] = await _rebuild(conn, 3000 if quick else 100_000)
            pipeline_threads = 10 if quick else 200
            results["pipeline"] = [
                await _pipeline(cluster.urls, tmp, n, pipeline_threads) for n in (1, 2)
            ]
            results["load"] = [
                await _load(cluster.urls, tmp, n, 20 if quick else 1000, 2 if quick else 5, 60)
                for n in (1, 2)
            ]
    sqlite, r3 = results["sqlite"], results["jetstream_r3"]
    results["ratios"] = {
        "fenced_append_p50_r3_over_sqlite": round(
            r3["fenced_append"]["p50_ms"] / max(sqlite["fenced_append"]["p50_ms"], 1e-3), 1
        ),
        "actions_per_s_sqlite_over_r3": round(
            sqlite["actions_per_s"]["per_s"] / max(r3["actions_per_s"]["per_s"], 1), 2
        ),
    }
    return results


def run(quick: bool) -> dict[str, Any]:
    result: dict[str, Any] = trio.run(_main, quick)
    return result


if __name__ == "__main__":
    import json
    import sys

    if "--load" in sys.argv:
        rest = sys.argv[sys.argv.index("--load") + 1 :]
        n = int(rest[0]) if rest else 1000
        print(json.dumps(trio.run(load_only, n, 5.0, 60.0), indent=2))
    else:
        print(json.dumps(run("--quick" in sys.argv), indent=2))

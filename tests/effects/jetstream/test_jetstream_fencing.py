"""One writer per thread, proven on real nats-servers: a runner that lost its lease can
never add to the thread's log nor post in the thread.

- in one process: a holder whose lease expired finds out before sending (its own lease
  check); with that check switched off, JetStream itself refuses its append (the expected
  last subject sequence names a sequence the new holder's epoch record moved past);
- a stale append that lands *before* the new holder's epoch record is not lost: the new
  holder reads it and its epoch record goes after it (one linear history);
- across processes on a 3-node cluster: a runner paused with SIGSTOP mid-run past its lease,
  another runner takes the threads over, then SIGCONT: the paused one acknowledges nothing
  more, posts nothing more, and nothing it sends after the takeover is in the log.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest
import trio

from threadspindle.effects.jetstream.connection import open_jetstream, subject_of
from threadspindle.effects.jetstream.fencing import FencedAgent
from threadspindle.effects.jetstream.log import (
    JetStreamLog,
    ThreadFenced,
    export_rows,
    open_jetstream_log,
    read_subject,
)
from threadspindle.runtime.core.actions import StatusRequested
from threadspindle.runtime.core.effect_types import PromptAgent
from threadspindle.runtime.core.model import AgentCapabilities
from threadspindle.testkit.nats_cluster import nats_cluster

CHILD = Path(__file__).with_name("js_child.py")


def _status(thread_id: str, n: int) -> StatusRequested:
    return StatusRequested(thread_id=thread_id, action_id=f"s{n}", at=float(n))


async def _flush_until(log: JetStreamLog, ticket: int, seconds: float = 5) -> bool:
    """Run the flusher until ``ticket`` is durable (True) or ``seconds`` pass (False)."""
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run_flusher)
        with trio.move_on_after(seconds):
            await log.wait_durable(ticket)
        nursery.cancel_scope.cancel()
    return log.is_durable(ticket)


async def test_a_holder_whose_lease_expired_cannot_append(tmp_path: Path) -> None:
    with nats_cluster(tmp_path) as cluster:
        async with open_jetstream(cluster.urls, lease_ttl_s=1) as conn:
            old = JetStreamLog(conn, "old")  # no renewer runs: its lease expires
            await old.claim("t")
            assert await _flush_until(old, old.append(_status("t", 1)))
            new = JetStreamLog(conn, "new")
            started = time.monotonic()
            await new.claim("t")  # waits out the old holder's TTL
            assert time.monotonic() - started >= 0.5
            assert new.last_seq("t") == 1
            # The old holder's own check stops it before anything is sent...
            ticket = old.append(_status("t", 2))
            assert not await _flush_until(old, ticket, 1)
            assert old.fenced("t") and not old.may_write("t")
            assert not await old.wait_durable_or_unwritable(ticket)
            # ...and with that check fooled, JetStream's fence refuses the append.
            stale = JetStreamLog(conn, "stale")
            await stale.claim("u")
            assert await _flush_until(stale, stale.append(_status("u", 1)))
            stale.leases.margin = 1e9  # it believes its lease lives for ever
            async with open_jetstream_log(conn, "other") as other:  # renews its lease
                await other.claim("u")
                assert stale.may_write("u")
                ticket = stale.append(_status("u", 2))
                assert not await _flush_until(stale, ticket, 2)
                assert "another writer appended" in (stale.fenced("u") or "")
                assert await _flush_until(other, other.append(_status("u", 3)))
            rows = [(seq, row["action_id"]) async for seq, _, row in export_rows(conn, "u")]
            assert rows == [(1, "s1"), (2, "s3")]  # the stale s2 is nowhere


async def test_a_stale_append_before_the_epoch_record_is_kept_in_order(tmp_path: Path) -> None:
    with nats_cluster(tmp_path) as cluster:
        async with open_jetstream(cluster.urls, lease_ttl_s=1) as conn:
            stale = JetStreamLog(conn, "stale")
            await stale.claim("t")
            stale.leases.margin = 1e9
            await trio.sleep(1.5)  # the lease is gone from the bucket
            # It appends after its lease expired but before anyone claimed the thread.
            assert await _flush_until(stale, stale.append(_status("t", 1)))
            async with open_jetstream_log(conn, "new") as new:
                await new.claim("t")
                assert [e.action.action_id for e in new.read("t")] == ["s1"]
                assert not await _flush_until(stale, stale.append(_status("t", 2)), 2)
                assert await _flush_until(new, new.append(_status("t", 3)))
            kinds = []
            async for _, data in read_subject(conn, subject_of("t")):
                record = orjson.loads(data)
                kinds.append((record["type"], record["holder"]))
            assert kinds == [
                ("epoch", "stale"),
                ("actions", "stale"),
                ("epoch", "new"),
                ("actions", "new"),
            ]


class Runner:
    """One js_child.py process."""

    def __init__(self, urls: list[str], holder: str, posted: Path, ttl: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), ",".join(urls), holder, str(posted), str(ttl)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.acked: list[str] = []
        self.refused: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("ack "):
                self.acked.append(line[4:])
            elif line.startswith("refused "):
                self.refused.append(line[8:])
            self.lines.put(line)

    def expect(self, word: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.lines.get(timeout=0.05) == word:
                    return True
            except queue.Empty:
                if self.proc.poll() is not None:
                    return False
        return False

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(10)


def _posted_by(path: Path, holder: str) -> list[str]:
    if not path.exists():
        return []
    return [
        line.split("\t")[1] for line in path.read_text().splitlines() if line.startswith(holder)
    ]


async def _holders_after_takeover(urls: list[str], thread_id: str, new: str) -> list[str]:
    """The holder of every record of the thread's subject from the new holder's epoch on."""
    holders: list[str] = []
    async with open_jetstream(urls, replicas=3, lease_ttl_s=1) as conn:
        async for _, data in read_subject(conn, subject_of(thread_id)):
            record = orjson.loads(data)
            if holders or (record["type"] == "epoch" and record["holder"] == new):
                holders.append(record["holder"])
    return holders


def test_a_runner_paused_past_its_lease_cannot_append_or_post(tmp_path: Path) -> None:
    ttl = 1.0
    posted = tmp_path / "posted.txt"
    with nats_cluster(tmp_path / "nats", size=3) as cluster:
        zombie = Runner(cluster.urls, "zombie", posted, ttl)
        heir: Runner | None = None
        try:
            assert zombie.expect("ready", 30)
            for thread_id in ("t1", "t2"):
                zombie.send(f"start c-{thread_id} {thread_id}")
                zombie.send(f"msg p1-{thread_id} {thread_id}")
            deadline = time.monotonic() + 20
            while len(zombie.acked) < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(zombie.acked) == 4, zombie.refused
            time.sleep(0.3)  # mid-run: the fake agent streams for about a second
            assert _posted_by(posted, "zombie"), "the zombie posted nothing before the pause"
            os.kill(zombie.proc.pid, signal.SIGSTOP)
            posted_before = _posted_by(posted, "zombie")
            heir = Runner(cluster.urls, "heir", posted, ttl)
            assert heir.expect("ready", 30)  # claimed both threads after the zombie's TTL
            heir.send("msg p2-t1 t1")
            assert heir.expect("ack p2-t1", 20)
            os.kill(zombie.proc.pid, signal.SIGCONT)
            zombie.send("msg z1 t1")
            zombie.send("msg z2 t2")
            time.sleep(3 * ttl)  # time for whatever the zombie would still do
            assert "z1" not in zombie.acked and "z2" not in zombie.acked
            assert sorted(zombie.refused) == ["z1", "z2"]  # told, not left hanging
            assert _posted_by(posted, "zombie") == posted_before  # nothing posted after SIGCONT
            assert _posted_by(posted, "heir"), "the heir posted nothing"
        finally:
            zombie.stop()
            if heir is not None:
                heir.send("quit")
                heir.stop()
        for thread_id in ("t1", "t2"):
            holders = trio.run(_holders_after_takeover, cluster.urls, thread_id, "heir")
            assert holders and set(holders) == {"heir"}, holders


class _Recording:
    """An agent adapter that notes what it is asked (the part of ``AgentPort`` used here)."""

    name = "recording"
    capabilities = AgentCapabilities()

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def prompt(self, prompt: PromptAgent) -> None:
        self.calls.append(f"prompt {prompt.text}")

    async def interrupt(self, run_id: str) -> None:
        self.calls.append(f"interrupt {run_id}")

    async def answer_permission(self, request_id: str, allow: bool) -> None:
        self.calls.append(f"permission {request_id}")

    async def stop(self) -> None:
        self.calls.append("stop")


async def test_a_holder_whose_lease_expired_sets_no_agent_to_work(tmp_path: Path) -> None:
    """The agent lane behind ``FencedAgent``: a runner resumed after another took over (here:
    its lease not renewed past the TTL) neither prompts nor answers its agent, which would
    work in the workdir beside the new owner's with nothing of it recorded; it may still
    interrupt and stop it."""
    with nats_cluster(tmp_path) as cluster:
        async with open_jetstream(cluster.urls, lease_ttl_s=1) as conn:
            log = JetStreamLog(conn, "old")  # no renewer runs: its lease expires
            await log.claim("t")
            inner = _Recording()
            agent = FencedAgent(inner, log, "t")  # type: ignore[arg-type]

            def prompt(n: int) -> PromptAgent:
                return PromptAgent(
                    agent="fake", workdir=str(tmp_path), run_id=f"r{n}", text=f"p{n}"
                )

            await agent.prompt(prompt(1))
            await trio.sleep(1.2)
            assert not log.may_write("t")
            for refused in (agent.prompt(prompt(2)), agent.answer_permission("q1", True)):
                with pytest.raises(ThreadFenced, match="lease is not held or not renewed"):
                    await refused
            await agent.interrupt("r1")
            await agent.stop()
    assert inner.calls == ["prompt p1", "interrupt r1", "stop"]
    assert agent.refused == 2

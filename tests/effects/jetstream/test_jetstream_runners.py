"""Runners and a gateway over JetStream on a real 3-node cluster: the active runner of a
workdir root is SIGKILLed at seeded random moments while prompts flow; a standby with the
same root takes over after the lease TTL each time (and a new standby is started).

What must hold at the end, when both threads are idle:
- every prompt the gateway got an acknowledgement for is in its thread's log exactly once
  (redeliveries of actions a dead runner stored but never acked are dropped by id);
- no prompt reached an agent twice, and all but the runs a kill cut short reached one;
- no output key was posted twice by the gateway (effects redelivered after a takeover
  find their key known).
Set SPINDLE_CRASH_SEED to replay one sequence of kill points.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import trio

from threadspindle.effects.jetstream.connection import open_jetstream
from threadspindle.effects.jetstream.gateway import Gateway
from threadspindle.effects.jetstream.log import export_rows, load_thread
from threadspindle.effects.jetstream.transport import open_transport
from threadspindle.runtime.core.actions import ConversationStarted, UserMessage
from threadspindle.runtime.core.model import ThreadState
from threadspindle.runtime.core.transitions import transition
from threadspindle.testkit.fake_chat import RenderWorld
from threadspindle.testkit.nats_cluster import nats_cluster

CHILD = Path(__file__).with_name("runner_child.py")
KILLS = int(os.environ.get("SPINDLE_RUNNER_KILLS", "20"))
THREADS = ("t1", "t2")
TTL = 1.0


class Child:
    def __init__(self, urls: list[str], name: str, root: Path, delivered: Path) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), ",".join(urls), name, str(root), str(delivered), str(TTL)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def expect_ready(self, timeout: float = 40) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.lines.get(timeout=0.05) == "ready":
                    return True
            except queue.Empty:
                if self.proc.poll() is not None:
                    return False
        return False

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


async def _settled(conn, thread_ids: tuple[str, ...]) -> bool:  # type: ignore[no-untyped-def]
    for thread_id in thread_ids:
        loaded = await load_thread(conn, thread_id)
        state = loaded.snapshot[1] if loaded.snapshot else ThreadState.new(thread_id)
        for entry in loaded.loaded:
            state = transition(state, entry.action).state
        if state.run is not None or state.queue:
            return False
    return True


@pytest.mark.timeout(600)
async def test_killing_the_active_runner_loses_and_repeats_nothing(tmp_path: Path) -> None:
    seed = int(os.environ.get("SPINDLE_CRASH_SEED", "1515"))
    rng = random.Random(seed)
    root = tmp_path / "work"
    root.mkdir()
    delivered = tmp_path / "delivered.txt"
    chat = RenderWorld()
    sent: dict[str, str] = {}  # prompt id -> thread
    children: list[Child] = []
    takeovers: list[float] = []  # SIGKILL of the active runner -> the standby serves
    with nats_cluster(tmp_path / "nats", size=3) as cluster:
        urls = cluster.urls
        try:
            async with open_jetstream(urls, replicas=3, lease_ttl_s=TTL) as conn:
                transport = await open_transport(conn)
                gateway = Gateway(conn, transport, chat.renderer)
                async with trio.open_nursery() as nursery:
                    await nursery.start(gateway.serve_effects)
                    active = Child(urls, "r0", root, delivered)
                    children.append(active)
                    assert await trio.to_thread.run_sync(active.expect_ready)
                    standby = Child(urls, "s0", root, delivered)
                    children.append(standby)
                    for thread_id in THREADS:
                        await gateway.start(
                            str(root),
                            ConversationStarted(
                                thread_id=thread_id,
                                action_id=f"c-{thread_id}",
                                at=time.time(),
                                agent="fake",
                                requested_workdir=str(root),
                                resolved_workdir=str(root),
                            ),
                        )
                    for kill in range(KILLS + 1):
                        for i in range(rng.randint(1, 3)):
                            prompt_id = f"p{kill}-{i}"
                            thread_id = rng.choice(THREADS)
                            await gateway.send(
                                UserMessage(
                                    thread_id=thread_id,
                                    action_id=prompt_id,
                                    at=time.time(),
                                    author_id="u",
                                    text=f"prompt {prompt_id}",
                                )
                            )
                            sent[prompt_id] = thread_id  # stored: acknowledged to the user
                            await trio.sleep(rng.uniform(0, 0.2))
                        if kill == KILLS:
                            break
                        await trio.sleep(rng.uniform(0, 0.5))
                        killed_at = time.monotonic()
                        active.kill()
                        assert await trio.to_thread.run_sync(standby.expect_ready), (
                            f"standby {standby.name} did not take over after kill {kill}"
                        )
                        takeovers.append(time.monotonic() - killed_at)
                        active, standby = standby, Child(urls, f"s{kill + 1}", root, delivered)
                        children.append(standby)
                    with trio.fail_after(120):
                        while True:
                            logged: list[str] = []
                            for thread_id in THREADS:
                                async for _, _, row in export_rows(conn, thread_id):
                                    if row["kind"] == "user_message":
                                        logged.append(row["action_id"])
                            if set(sent) <= set(logged) and await _settled(conn, THREADS):
                                break
                            await trio.sleep(0.5)
                    await trio.sleep(1)  # the last effects reach the gateway
                    nursery.cancel_scope.cancel()
        finally:
            for child in children:
                child.kill()
    counts = Counter(logged)
    assert not [p for p in sent if counts[p] != 1], "a prompt stored twice or never"
    texts = Counter(
        line.split("\t")[2].removeprefix("prompt ") for line in delivered.read_text().splitlines()
    )
    assert not [p for p, n in texts.items() if n > 1], "a prompt reached an agent twice"
    undelivered = [p for p in sent if texts[p] == 0]
    assert len(undelivered) <= KILLS, undelivered  # at most the run each kill cut short
    assert chat.duplicate_keys == [], "an output key posted twice"
    assert chat.keys(), "the gateway posted nothing"
    print(
        f"seed {seed}: {KILLS} kills, {len(sent)} prompts, {sum(texts.values())} delivered, "
        f"{len(undelivered)} cut short, {len(chat.keys())} keys posted; takeover "
        f"(lease TTL {TTL} s) median {sorted(takeovers)[len(takeovers) // 2]:.2f} s, "
        f"max {max(takeovers):.2f} s"
    )

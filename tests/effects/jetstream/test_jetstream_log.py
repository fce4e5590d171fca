"""The JetStream thread log on one real nats-server: appends become durable only when
stored, in order, one message per flushed batch; a claim reads back what was stored (with
the snapshot shortening the read); export reads the subject from the start; a thread id
that is not a subject token still gets its own subject."""

from __future__ import annotations

from pathlib import Path

import trio

from threadspindle.effects.jetstream.connection import open_jetstream, subject_of
from threadspindle.effects.jetstream.log import export_rows, open_jetstream_log, read_subject
from threadspindle.runtime.core.actions import OutputPosted, StatusRequested
from threadspindle.runtime.core.model import ThreadState
from threadspindle.runtime.core.transitions import transition
from threadspindle.runtime.live.store import rebuild_from_log
from threadspindle.testkit.nats_cluster import nats_cluster


def _status(thread_id: str, n: int) -> StatusRequested:
    return StatusRequested(thread_id=thread_id, action_id=f"s{n}", at=float(n))


async def test_appends_are_durable_once_stored_and_a_claim_reads_them_back(
    tmp_path: Path,
) -> None:
    with nats_cluster(tmp_path) as cluster:
        async with open_jetstream(cluster.urls, lease_ttl_s=2) as conn:
            async with open_jetstream_log(conn, "r1") as log, trio.open_nursery() as nursery:
                await log.claim("t")
                await nursery.start(log.run_flusher)
                tickets = [log.append(_status("t", n)) for n in range(1, 51)]
                assert not log.is_durable(tickets[0])  # nothing is stored synchronously
                await log.wait_durable(tickets[-1])
                assert all(log.is_durable(t) for t in tickets)
                log.append(
                    OutputPosted(
                        thread_id="t", action_id="p", at=60.0, key="k", message_ids=("m1",)
                    )
                )
                await log.wait_durable(log.append(_status("t", 61)))
                assert log.posted_outputs("t") == {"k": ("m1",)}
                nursery.cancel_scope.cancel()
            # One message per batch: the epoch record, then few batches, not 52 messages.
            messages = [seq async for seq, _ in read_subject(conn, subject_of("t"))]
            assert 2 <= len(messages) <= 5
            rows = [row async for row in export_rows(conn, "t")]
            assert [seq for seq, _, _ in rows] == list(range(1, 53))
            assert rows[0][2]["action_id"] == "s1" and rows[50][2]["kind"] == "output_posted"
            # Another runner claims the thread (the first released its lease on the way out).
            async with open_jetstream_log(conn, "r2") as again:
                with trio.fail_after(5):
                    await again.claim("t")
                assert again.last_seq("t") == 52
                assert [e.seq for e in again.read("t")] == list(range(1, 53))
                assert again.posted_outputs("t") == {"k": ("m1",)}
                store, folded = rebuild_from_log(again, transition)
                assert folded == 52 and store.get("t") is not None


async def test_a_snapshot_lets_a_claim_read_only_the_tail(tmp_path: Path) -> None:
    with nats_cluster(tmp_path) as cluster:
        async with open_jetstream(cluster.urls, lease_ttl_s=2) as conn:
            state = ThreadState.new("t")
            async with open_jetstream_log(conn, "r1", snapshot_every=10) as log:
                async with trio.open_nursery() as nursery:
                    await log.claim("t")
                    await nursery.start(log.run_flusher)
                    for n in range(1, 26):
                        action = _status("t", n)
                        state = transition(state, action).state
                        ticket = log.append(action, state)
                        await log.wait_durable(ticket)  # one message each
                    nursery.cancel_scope.cancel()
            async with open_jetstream_log(conn, "r2") as again:
                await again.claim("t")
                seq, snap = again.snapshots()["t"]
                assert seq == 20
                assert [e.seq for e in again.read("t", after_seq=seq)] == [21, 22, 23, 24, 25]
                store, folded = rebuild_from_log(again, transition)
                assert folded == 5
                assert store.get("t") == state  # snapshot + tail = the fold of everything


async def test_a_thread_first_seen_by_append_is_claimed_by_the_flusher(tmp_path: Path) -> None:
    thread = "guild 1/thread.7"  # not a subject token
    with nats_cluster(tmp_path) as cluster:
        async with open_jetstream(cluster.urls, lease_ttl_s=2) as conn:
            async with open_jetstream_log(conn, "r1") as log, trio.open_nursery() as nursery:
                await nursery.start(log.run_flusher)
                ticket = log.append(_status(thread, 1))
                with trio.fail_after(5):
                    await log.wait_durable(ticket)
                assert log.holds(thread)
                assert await log.leases.holder_of(thread) == "r1"
                nursery.cancel_scope.cancel()
            assert [r[0] async for r in export_rows(conn, thread)] == [1]
            assert "=" in subject_of(thread) and "/" not in subject_of(thread)


async def test_a_second_runner_uses_the_lease_ttl_of_the_existing_bucket(tmp_path: Path) -> None:
    with nats_cluster(tmp_path) as cluster:
        async with open_jetstream(cluster.urls, lease_ttl_s=2) as first:
            assert first.lease_ttl_s == 2
            async with open_jetstream(cluster.urls, lease_ttl_s=7) as second:
                # Judging a lease by 7 s while the bucket drops it after 2 s would let a
                # holder believe in a lease that is gone: the bucket's TTL wins.
                assert second.lease_ttl_s == 2

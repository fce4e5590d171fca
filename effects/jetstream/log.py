"""The thread log on NATS JetStream, with one fenced writer per thread (``ThreadLog`` port).

One job: keep each thread's actions in its own subject of the ``SPINDLE`` stream so that a
runner that lost the thread's lease can never add to it. How:

- ``append`` buffers the action (no I/O) and hands out a ticket, like the SQLite log. The
  flusher publishes each thread's buffered actions as one message (a batch, chunked to
  ``max_batch_bytes``) with an *awaited* ``js.publish`` - not ``publish_async``, which never
  resolves when the server refuses (nats.py issue #985) - carrying
  ``Nats-Expected-Last-Subject-Sequence``: the stream sequence of the thread's last message
  as this writer knows it. A ticket is durable when JetStream acknowledged its message
  (stored on a quorum of nodes, each fsynced: ``sync_interval: always``).
- ``claim`` takes the thread's lease (``effects.jetstream.lease``), reads the thread's
  newest snapshot and the subject after it, and then appends an **epoch record** with the
  expected sequence it read. The fence does not know about leases: without that record a
  stale holder's next append (expecting the same last sequence) would still succeed. Once
  the epoch record is stored, any append of the previous holder names a stale sequence and
  JetStream refuses it (error 10071).
- A refused append is checked, because a timeout does not mean "not stored": the thread's
  last message is read back and, when it is this batch (header ``Spindle-Batch``), the
  batch counts as stored. Otherwise the thread is **fenced for good**: its buffered and
  future actions are never durable, so nothing waiting on them (the reactor's effects,
  ingress's acknowledgement) ever happens, and ``wait_durable_or_unwritable`` answers False.
- Before each publish the holder checks its own lease (``Leases.valid``, renewing on the
  spot when it is stale): a process that was paused past its TTL stops before it sends
  anything; the fence is the second line. A lease that merely lapsed (renewals failed
  while JetStream had no quorum) fences the thread for now: what is appended stays
  buffered, and ``_regain`` takes the thread back when the lease can be created again and an
  epoch record expecting this runner's last sequence is stored (nobody wrote meanwhile).
- When JetStream cannot store (no quorum, no responders, timeouts) the log is
  ``unwritable`` (the runtime refuses prompts from people with a message, as for a full
  disk) and the same batch, same expected sequence, is retried every ``retry_interval_s``
  until it is stored; then the log is writable again.
- Snapshots (every ``snapshot_every`` actions of a thread, as in the SQLite log) go to the
  ``spindle_snapshots`` KV bucket after the batch holding their action is stored, with the
  stream sequence of that batch and the posted outputs so far; a claim reads the subject
  only from there.

Reading a subject back (``read_subject``, ``load_thread``, ``export_rows``) is
``effects.jetstream.subject_read``'s; its names are importable from here as well.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import trio
from nats.js.api import Header
from nats.js.errors import BadRequestError, NotFoundError

from threadspindle.effects.jetstream.connection import (
    STREAM,
    JetStream,
    subject_of,
    thread_token,
)
from threadspindle.effects.jetstream.lease import TRANSIENT, Leases, LeaseTimeout
from threadspindle.effects.jetstream.subject_read import (
    LoadedThread,
    add_posted,
    decode_record,
    export_rows,
    load_thread,
    read_subject,
)
from threadspindle.runtime.core.actions import Action, OutputPosted
from threadspindle.runtime.core.model import ThreadState
from threadspindle.runtime.live.log import LogStatistics, LogUnwritable, action_json
from threadspindle.runtime.live.log_read import LogError, LoggedAction

__all__ = [
    "BATCH_HEADER",
    "JetStreamLog",
    "ThreadFenced",
    "decode_record",
    "export_rows",
    "load_thread",
    "open_jetstream_log",
    "read_subject",
]

logger = logging.getLogger("spindle.jetstream.log")

BATCH_HEADER = "Spindle-Batch"
WRONG_LAST_SEQUENCE = 10071  # JetStream's error code for a failed expected-sequence check
FORMAT_VERSION = 1
LEASE_LOST = "its lease lapsed or another runner holds it"


class ThreadFenced(LogError):
    """This runner may no longer write the thread: its lease is lost or another writer
    appended since (the thread's actions here are never durable)."""


# How long a claim retries while JetStream cannot answer (a stream leader election takes
# a few seconds on a loaded machine).
CLAIM_TRANSIENT_S = 30.0


@dataclass(slots=True)
class _Entry:
    seq: int
    action: Action
    json: str
    ticket: int


@dataclass(slots=True)
class _Batch:
    id: str
    entries: list[_Entry]
    payload: bytes


@dataclass
class _Thread:
    thread_id: str
    subject: str
    claimed: bool = False
    next_seq: int = 1
    last_stream_seq: int = 0  # the stream sequence of the subject's last message (0: none)
    snapshot: tuple[int, ThreadState] | None = None
    loaded: list[LoggedAction] = field(default_factory=list)  # the tail read at claim
    posted: dict[str, tuple[str, ...]] = field(default_factory=dict)
    pending: list[_Entry] = field(default_factory=list)
    retry: _Batch | None = None  # sent, outcome unknown: re-sent as it is
    snapshot_due: dict[int, str] = field(default_factory=dict)  # seq -> state json
    fenced: str | None = None  # why this runner may not write the thread now
    final: bool = False  # fenced for good: another writer appended (else: lease lapsed)


class JetStreamLog:
    """The ``ThreadLog`` of one runner over JetStream (see the module doc)."""

    def __init__(
        self,
        conn: JetStream,
        holder: str,
        *,
        snapshot_every: int = 1000,
        retry_interval_s: float = 0.5,
        publish_timeout_s: float = 2.0,
        max_batch_bytes: int = 512 * 1024,
        claim_timeout_s: float | None = None,
    ) -> None:
        self.conn = conn
        self.holder = holder
        self.path = Path(f"jetstream:{STREAM}")
        self.snapshot_every = snapshot_every
        self.retry_interval_s = retry_interval_s
        self.publish_timeout_s = publish_timeout_s
        self.max_batch_bytes = max_batch_bytes
        self.claim_timeout_s = claim_timeout_s
        self.leases = Leases(conn, holder, on_lost=self._lease_lost)
        self.unwritable: LogUnwritable | None = None
        self._listeners: list[Callable[[LogUnwritable | None], object]] = []
        self._threads: dict[str, _Thread] = {}
        self._appended = 0
        self._undurable: dict[int, str] = {}  # ticket -> thread, until stored
        self._changed = trio.Event()
        # (ticket, callback) of the reactor, run by _notify once the ticket is stored.
        self._on_durable: list[tuple[int, Callable[[], object]]] = []
        self._wakeup = trio.Event()
        self.flushes = 0  # flush rounds that stored something
        self.messages = 0  # batches stored
        self.rows_written = 0
        self.flush_seconds = 0.0
        self.write_failures = 0
        self.fenced_appends = 0  # appends refused by the fence (or by a lost lease)

    # --- threads held ----------------------------------------------------------------------

    async def claim(self, thread_id: str, *, timeout_s: float | None = None) -> None:
        """Become the thread's one writer: take its lease (waiting out another holder's
        TTL), load its snapshot and the subject after it, append the epoch record."""
        t = self._threads.get(thread_id)
        if t is not None and t.claimed and t.fenced is None:
            return
        revision = await self.leases.acquire(
            thread_id, timeout_s=timeout_s if timeout_s is not None else self.claim_timeout_s
        )
        subject = subject_of(thread_id)
        # JetStream may not answer for a moment (a stream whose leader is being elected
        # answers "no responders"): retried for a while, then the error is the caller's.
        deadline = trio.current_time() + CLAIM_TRANSIENT_S
        try:
            while True:
                try:
                    loaded = await self._load(thread_id)
                    stored_at = await self._publish_epoch(subject, loaded.last_stream_seq, revision)
                except TRANSIENT as exc:
                    if trio.current_time() >= deadline:
                        raise
                    logger.info("claim of %s: %s; retried", thread_id, _describe(exc))
                    await trio.sleep(self.retry_interval_s)
                    continue
                if stored_at is not None:
                    break
                # The previous holder appended after we read (or a retried epoch record was
                # stored after all): read again, then fence it.
        except BaseException:
            # Not claimed after all: let the lease go rather than renew it for nothing.
            with trio.CancelScope(shield=True), trio.move_on_after(self.publish_timeout_s):
                await self.leases.release(thread_id)
            raise
        ack_seq = stored_at
        t = _Thread(
            thread_id,
            subject,
            claimed=True,
            next_seq=loaded.next_seq,
            last_stream_seq=ack_seq,
            snapshot=loaded.snapshot,
            loaded=loaded.loaded,
            posted=loaded.posted,
        )
        self._threads[thread_id] = t

    async def release(self, thread_id: str) -> None:
        """Stop writing the thread and give its lease up. What is still buffered is
        dropped, never durable (wait for it first)."""
        self._threads.pop(thread_id, None)
        await self.leases.release(thread_id)

    def holds(self, thread_id: str) -> bool:
        t = self._threads.get(thread_id)
        return t is not None and t.claimed and t.fenced is None

    def may_write(self, thread_id: str) -> bool:
        """Held, not fenced, and the lease renewed within its TTL (as this runner sees it)."""
        return self.holds(thread_id) and self.leases.valid(thread_id)

    def fenced(self, thread_id: str) -> str | None:
        """Why the thread can no longer be written by this runner (None: it can)."""
        t = self._threads.get(thread_id)
        return None if t is None else t.fenced

    def _lease_lost(self, thread_id: str) -> None:
        t = self._threads.get(thread_id)
        if t is not None:
            self._fence(t, LEASE_LOST)

    def _fence(self, t: _Thread, why: str, *, final: bool = False) -> None:
        """Stop writing the thread. Not ``final`` (the lease lapsed): what is appended stays
        buffered and ``_regain`` may take the thread back if nobody wrote meanwhile."""
        if t.fenced is None or (final and not t.final):
            t.fenced = why
            logger.warning("thread %s fenced: %s", t.thread_id, why)
        if final and not t.final:
            t.final = True
            # Never durable: never shown, never acknowledged.
            self.fenced_appends += len(t.pending) + (len(t.retry.entries) if t.retry else 0)
            t.pending, t.retry = [], None
        self._notify()

    async def _publish_epoch(self, subject: str, expected: int, revision: int) -> int | None:
        """Append the epoch record of a new holding; its stream sequence, or None when the
        subject moved past ``expected`` (another writer appended). Transient errors raise."""
        epoch_id = f"epoch-{self.holder}-{revision}-{uuid.uuid4().hex[:8]}"
        record = {
            "v": FORMAT_VERSION,
            "type": "epoch",
            "holder": self.holder,
            "lease_revision": revision,
        }
        try:
            ack = await self.conn.call(
                self.conn.js.publish,
                subject,
                orjson.dumps(record),
                timeout=self.publish_timeout_s,
                headers={
                    Header.EXPECTED_LAST_SUBJECT_SEQUENCE: str(expected),
                    BATCH_HEADER: epoch_id,
                },
            )
        except BadRequestError as exc:
            if exc.err_code != WRONG_LAST_SEQUENCE:
                raise
            return await self._stored_as(subject, epoch_id)
        return int(ack.seq)

    async def _regain(self, t: _Thread, errors: list[str]) -> bool:
        """Take back a thread whose lease lapsed (renewals failed past the TTL, say while
        JetStream had no quorum): re-acquire the lease, then append an epoch record that
        expects the last sequence this runner wrote. Stored: nobody wrote in between, and
        what stayed buffered is written on. Refused: another runner has written: fenced for
        good (this runner's state of the thread is stale)."""
        try:
            if t.thread_id not in self.leases.held:
                await self.leases.acquire(t.thread_id, timeout_s=0)
            stored_at = await self._publish_epoch(
                t.subject, t.last_stream_seq, self.leases.held[t.thread_id].revision
            )
        except LeaseTimeout:
            return False  # another runner holds the lease: this thread stays fenced
        except TRANSIENT as exc:
            errors.append(_describe(exc))  # JetStream cannot answer: the log cannot store
            return False
        if stored_at is None:
            self._fence(t, "another runner has written the thread since", final=True)
            await self.leases.release(t.thread_id)
            return False
        t.last_stream_seq, t.fenced = stored_at, None
        logger.warning("thread %s taken back after its lease lapsed", t.thread_id)
        return True

    async def _load(self, thread_id: str) -> LoadedThread:
        return await load_thread(self.conn, thread_id)

    # --- writing ---------------------------------------------------------------------------

    def append(self, action: Action, state_after: ThreadState | None = None) -> int:
        thread_id = action.thread_id
        t = self._threads.get(thread_id)
        if t is None:
            # A thread this runner never claimed: claimed by the flusher before its first
            # publish, and only if its subject is still empty (see ``_claim_new``).
            t = self._threads[thread_id] = _Thread(thread_id, subject_of(thread_id))
        # Serialized before its seq is taken (a failure must leave no gap), a lone surrogate
        # replaced in the row (``action_json``), as the SQLite log does.
        row = action_json(action)
        self._appended += 1
        ticket = self._appended
        seq = t.next_seq
        t.next_seq += 1
        if t.final:
            self.fenced_appends += 1
            self._undurable[ticket] = thread_id  # never durable: never shown
            return ticket
        t.pending.append(_Entry(seq, action, row, ticket))
        if state_after is not None and seq % self.snapshot_every == 0:
            with contextlib.suppress(ValueError):  # a snapshot is an optimisation: skipped
                t.snapshot_due[seq] = state_after.model_dump_json()
        self._undurable[ticket] = thread_id
        self._wakeup.set()
        return ticket

    def flush(self) -> int:
        """Nothing is written synchronously to JetStream: the flusher writes (and makes a
        last attempt when cancelled). Returns 0."""
        return 0

    def is_durable(self, ticket: int) -> bool:
        return ticket <= self._appended and ticket not in self._undurable

    async def wait_durable(self, ticket: int) -> None:
        while not self.is_durable(ticket):
            await self._changed.wait()

    async def wait_durable_or_unwritable(self, ticket: int) -> bool:
        while not self.is_durable(ticket):
            thread_id = self._undurable.get(ticket)
            t = self._threads.get(thread_id) if thread_id is not None else None
            if self.unwritable is not None or (t is not None and t.fenced is not None):
                return False
            await self._changed.wait()
        return True

    def when_durable(self, ticket: int, callback: Callable[[], object]) -> None:
        """``callback()`` once ``ticket`` is stored (at once if it is). A thread's entries
        are published in order, so its callbacks run in ticket order; a fenced thread's
        never run, as its effects are never shown."""
        if self.is_durable(ticket):
            callback()
        else:
            self._on_durable.append((ticket, callback))

    def flush_now(self) -> None:
        """JetStream is written by the flusher alone (a publish is awaited): wake it now."""
        self._wakeup.set()

    def _notify(self) -> None:
        if self._on_durable:
            waiting, self._on_durable = self._on_durable, []
            for ticket, callback in waiting:
                if self.is_durable(ticket):
                    callback()
                else:
                    self._on_durable.append((ticket, callback))
        done, self._changed = self._changed, trio.Event()
        done.set()

    def on_writability(
        self, listener: Callable[[LogUnwritable | None], object]
    ) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _set_unwritable(self, error: LogUnwritable | None) -> None:
        was = self.unwritable
        self.unwritable = error
        if (was is None) == (error is None):
            return
        self._notify()
        for listener in list(self._listeners):
            listener(error)

    async def run_flusher(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Publish what is buffered, every thread's batch concurrently (each thread's in
        order); while JetStream cannot store, retry every ``retry_interval_s``. A last
        round is tried, shielded and bounded, when cancelled."""
        task_status.started()
        try:
            while True:
                if self.unwritable is None and not self._regainable():
                    await self._wakeup.wait()
                    self._wakeup = trio.Event()
                    await trio.lowlevel.checkpoint()  # let every ready actor append first
                else:
                    await trio.sleep(self.retry_interval_s)
                    self._wakeup = trio.Event()
                await self._flush_round()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(2 * self.publish_timeout_s):
                await self._flush_round()

    def _regainable(self) -> bool:
        return any(
            t.fenced is not None and not t.final and (t.pending or t.retry)
            for t in self._threads.values()
        )

    async def _flush_round(self) -> None:
        due = [t for t in self._threads.values() if (t.pending or t.retry) and not t.final]
        if not due:
            return
        errors: list[str] = []
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for t in due:
                nursery.start_soon(self._flush_thread, t, errors)
        self.flush_seconds += time.perf_counter() - started
        if errors:
            self.write_failures += 1
            self._set_unwritable(LogUnwritable(self.path, f"JetStream cannot store: {errors[0]}"))
        else:
            self.flushes += 1
            self._set_unwritable(None)
        self._notify()

    async def _flush_thread(self, t: _Thread, errors: list[str]) -> None:
        if not t.claimed:
            claimed = await self._claim_new(t, errors)
            if claimed is None:
                return
            t = claimed
        if t.fenced is not None and not await self._regain(t, errors):
            return
        while (t.retry is not None or t.pending) and t.fenced is None:
            if not self.leases.valid(t.thread_id):
                # Not renewed lately (paused? JetStream unreachable?): renew now, or find out
                # that another runner has it. Nothing is sent on a lease that may be gone.
                renewed = t.thread_id in self.leases.held and await self.leases.renew(t.thread_id)
                if not renewed:
                    if t.thread_id in self.leases.held:
                        errors.append(f"the lease of thread {t.thread_id} could not be renewed")
                    else:
                        self._fence(t, LEASE_LOST)
                    return
            if t.retry is None:
                t.retry = self._batch(t)
            batch = t.retry
            try:
                ack = await self.conn.call(
                    self.conn.js.publish,
                    t.subject,
                    batch.payload,
                    timeout=self.publish_timeout_s,
                    headers={
                        Header.EXPECTED_LAST_SUBJECT_SEQUENCE: str(t.last_stream_seq),
                        BATCH_HEADER: batch.id,
                    },
                )
                stored_at: int | None = ack.seq
            except BadRequestError as exc:
                if exc.err_code != WRONG_LAST_SEQUENCE:
                    errors.append(_describe(exc))
                    return
                # Refused, or stored by an earlier attempt whose answer was lost?
                try:
                    stored_at = await self._stored_as(t.subject, batch.id)
                except TRANSIENT as again:
                    errors.append(_describe(again))
                    return
                if stored_at is None:
                    self._fence(
                        t, "another writer appended to the thread (stale lease)", final=True
                    )
                    return
            except TRANSIENT as exc:
                errors.append(_describe(exc))
                return
            assert stored_at is not None  # every branch that leaves it None returned
            t.last_stream_seq = stored_at
            t.retry = None
            await self._stored(t, batch, stored_at)

    async def _claim_new(self, t: _Thread, errors: list[str]) -> _Thread | None:
        """Claim a thread first seen by ``append``: take its lease and write the epoch
        record, provided its subject is empty (else this runner's state of it started from
        nothing while the log has history: fenced, never written, its lease let go)."""
        try:
            await self.claim(t.thread_id, timeout_s=self.publish_timeout_s)
        except TRANSIENT as exc:
            errors.append(_describe(exc))
            return None
        except Exception as exc:  # LeaseTimeout, LogCorrupt: this runner must not write it
            self._fence(t, f"it could not be claimed: {exc}", final=True)
            return None
        claimed = self._threads[t.thread_id]
        if claimed.next_seq != 1:
            self._fence(claimed, "it has history this runner never loaded", final=True)
            await self.leases.release(t.thread_id)
            return None
        # What was appended before the claim goes first, with the seqs it was given.
        claimed.next_seq = t.next_seq
        claimed.pending = t.pending + claimed.pending
        claimed.snapshot_due.update(t.snapshot_due)
        t.pending = []
        return claimed

    def _batch(self, t: _Thread) -> _Batch:
        """The next message of the thread: its buffered entries up to ``max_batch_bytes``."""
        taken: list[_Entry] = []
        size = 0
        for entry in t.pending:
            if taken and size + len(entry.json) > self.max_batch_bytes:
                break
            taken.append(entry)
            size += len(entry.json) + 32
        del t.pending[: len(taken)]
        batch_id = uuid.uuid4().hex
        body = ",".join(f"[{e.seq},{e.action.at!r},{e.json}]" for e in taken)
        head = orjson.dumps(
            {"v": FORMAT_VERSION, "type": "actions", "holder": self.holder, "batch": batch_id}
        )
        payload = head[:-1] + b',"entries":[' + body.encode() + b"]}"
        return _Batch(batch_id, taken, payload)

    async def _stored_as(self, subject: str, batch_id: str) -> int | None:
        """The stream sequence of the subject's last message when it is this batch."""
        try:
            last = await self.conn.call(self.conn.js.get_last_msg, STREAM, subject)
        except NotFoundError:
            return None
        headers = last.headers or {}
        return last.seq if headers.get(BATCH_HEADER) == batch_id else None

    async def _stored(self, t: _Thread, batch: _Batch, stream_seq: int) -> None:
        self.messages += 1
        self.rows_written += len(batch.entries)
        snapshot: tuple[int, str, dict[str, tuple[str, ...]]] | None = None
        for entry in batch.entries:
            self._undurable.pop(entry.ticket, None)
            if isinstance(entry.action, OutputPosted):
                add_posted(t.posted, entry.action)
            state = t.snapshot_due.pop(entry.seq, None)
            if state is not None:
                snapshot = (entry.seq, state, dict(t.posted))
        self._notify()
        if snapshot is not None:
            seq, state, posted = snapshot
            body = (
                orjson.dumps({"seq": seq, "stream_seq": stream_seq, "posted": posted})[:-1]
                + b',"state":'
                + state.encode()
                + b"}"
            )
            try:
                await self.conn.call(self.conn.snapshots.put, thread_token(t.thread_id), body)
            except TRANSIENT as exc:  # a snapshot is a cache: the next one will do
                logger.warning("snapshot of %s at seq %d not stored: %s", t.thread_id, seq, exc)

    # --- reading (what ``claim`` loaded) ---------------------------------------------------

    def thread_ids(self) -> list[str]:
        return [t.thread_id for t in self._threads.values() if t.claimed]

    def last_seq(self, thread_id: str) -> int:
        t = self._threads.get(thread_id)
        return 0 if t is None else t.next_seq - 1

    def snapshots(self) -> dict[str, tuple[int, ThreadState]]:
        return {
            t.thread_id: t.snapshot
            for t in self._threads.values()
            if t.claimed and t.snapshot is not None
        }

    def read(self, thread_id: str, after_seq: int = 0) -> Iterator[LoggedAction]:
        """The actions read at ``claim`` with ``seq > after_seq`` (from the snapshot on)."""
        t = self._threads.get(thread_id)
        if t is None:
            return iter(())
        floor = t.snapshot[0] if t.snapshot is not None else 0
        if after_seq < floor:
            raise LogError(
                f"thread {thread_id}: seqs up to {floor} are in its snapshot; read them with "
                "read_subject"
            )
        return (entry for entry in t.loaded if entry.seq > after_seq)

    def posted_outputs(self, thread_id: str) -> dict[str, tuple[str, ...]]:
        t = self._threads.get(thread_id)
        return {} if t is None else dict(t.posted)

    def check_posted_outputs(self) -> None:
        """Every ``output_posted`` entry was decoded and checked by ``claim``."""

    def statistics(self) -> LogStatistics:
        return LogStatistics(
            appended=self._appended,
            durable=self._appended - len(self._undurable),
            pending=len(self._undurable),
            flushes=self.flushes,
            rows_written=self.rows_written,
            flush_us=int(self.flush_seconds * 1e6),
            write_failures=self.write_failures,
        )


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text


@asynccontextmanager
async def open_jetstream_log(
    conn: JetStream, holder: str, **kwargs: Any
) -> AsyncIterator[JetStreamLog]:
    """A ``JetStreamLog`` with its lease renewer running; on the way out every lease is
    released (the next runner takes the threads over at once, not after the TTL)."""
    log = JetStreamLog(conn, holder, **kwargs)
    async with trio.open_nursery() as nursery:
        await nursery.start(log.leases.run_renewer)
        try:
            yield log
        finally:
            nursery.cancel_scope.cancel()
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                for thread_id in list(log.leases.held):
                    if log.holds(thread_id):
                        await log.leases.release(thread_id)

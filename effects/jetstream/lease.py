"""Thread leases in the ``spindle_leases`` KV bucket: which runner may write a thread's log.

A lease is a key (the thread's token) whose value names the holder. ``acquire`` creates the
key (``kv.create`` succeeds only when the key is absent or deleted) and retries until the
previous holder's key expires (the bucket's TTL counts from the last write) or is released.
``run_renewer`` updates every held key with its expected revision every third of the TTL;
an update refused for a wrong revision means another runner holds the key now: the lease is
lost for good and ``on_lost`` is told. ``valid`` is the holder's own conservative view: held,
and renewed (counting from *before* the renewal request was sent) within the TTL minus a
margin; a process paused past its TTL (SIGSTOP, a long GC, a partition) finds ``valid``
false the moment it runs again, before it could write anything.

The lease alone does not fence the log (a stale holder could still publish): the log's
appends carry the expected last subject sequence, and a new holder appends an epoch record
first (``effects.jetstream.log``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import Error as JetStreamError
from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from threadspindle.effects.jetstream.connection import JetStream, thread_token

__all__ = ["LeaseHeld", "LeaseTimeout", "Leases"]

logger = logging.getLogger("spindle.jetstream.lease")

# Errors of a NATS or JetStream call that say "not now" (no quorum, no responders, a
# timeout, a reconnect): retried, never taken as a lost lease.
TRANSIENT: tuple[type[BaseException], ...] = (NatsError, JetStreamError, NatsTimeout, TimeoutError)


class LeaseTimeout(RuntimeError):
    """The lease could not be acquired in time (another runner holds it and renews it)."""


@dataclass
class LeaseHeld:
    revision: int
    renewed_at: float  # time.monotonic() before the request that set ``revision`` was sent
    acquired_at: float


class Leases:
    """The leases one holder (a runner) has, and their renewal."""

    def __init__(
        self,
        conn: JetStream,
        holder: str,
        *,
        on_lost: Callable[[str], object] | None = None,
        margin: float = 0.8,
        bucket: KeyValue | None = None,
        key: Callable[[str], str] = thread_token,
    ) -> None:
        self.conn = conn
        # The thread leases by default; the runner's root leases use another bucket.
        self.bucket = bucket if bucket is not None else conn.leases
        self.key = key
        self.holder = holder
        self.ttl_s = conn.lease_ttl_s
        self.margin = margin  # a lease counts as valid for this share of the TTL
        self.held: dict[str, LeaseHeld] = {}
        self.lost: set[str] = set()
        # The last revision of a lease given up for lack of renewal: if nobody wrote the key
        # since, updating that revision takes it back at once (no wait for its expiry).
        self.lapsed: dict[str, int] = {}
        self.on_lost = on_lost
        self.renewals = 0
        self.renewal_failures = 0

    def valid(self, thread_id: str) -> bool:
        lease = self.held.get(thread_id)
        if lease is None:
            return False
        return time.monotonic() - lease.renewed_at < self.ttl_s * self.margin

    async def holder_of(self, thread_id: str) -> str | None:
        """Who holds the thread's lease now, per the bucket (None: nobody)."""
        try:
            entry = await self.conn.call(self.bucket.get, self.key(thread_id))
        except JetStreamError:
            return None
        return entry.value.decode() if entry.value else None

    async def acquire(self, thread_id: str, *, timeout_s: float | None = None) -> int:
        """Hold the thread's lease; returns its revision. Waits (polling a tenth of the
        TTL) while another holder's key lives; ``LeaseTimeout`` after ``timeout_s``."""
        key = self.key(thread_id)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        poll = max(0.05, self.ttl_s / 10)
        while True:
            sent = time.monotonic()
            try:
                lapsed = self.lapsed.get(thread_id)
                if lapsed is not None:
                    try:
                        revision = await self.conn.call(
                            self.bucket.update, key, self.holder.encode(), last=lapsed
                        )
                    except KeyWrongLastSequenceError:
                        del self.lapsed[thread_id]  # written since: acquire it as new
                        raise
                else:
                    revision = await self.conn.call(self.bucket.create, key, self.holder.encode())
            except KeyWrongLastSequenceError:
                pass  # held by someone else (or by us from before a restart): wait it out
            except TRANSIENT as exc:
                logger.info("lease of %s: not now (%s)", thread_id, exc)
            else:
                self.held[thread_id] = LeaseHeld(revision, sent, sent)
                self.lost.discard(thread_id)
                self.lapsed.pop(thread_id, None)
                return revision
            if deadline is not None and time.monotonic() > deadline:
                raise LeaseTimeout(
                    f"the lease of thread {thread_id} is held by "
                    f"{await self.holder_of(thread_id)!r}"
                )
            await trio.sleep(poll)

    async def renew(self, thread_id: str) -> bool:
        """One renewal: True when renewed, False when it failed for now (the lease may still
        be ours); a wrong revision marks the lease lost (``on_lost``)."""
        lease = self.held.get(thread_id)
        if lease is None:
            return False
        sent = time.monotonic()
        try:
            revision = await self.conn.call(
                self.bucket.update,
                self.key(thread_id),
                self.holder.encode(),
                last=lease.revision,
            )
        except KeyWrongLastSequenceError:
            self._lose(thread_id, "another runner holds it now")
            return False
        except TRANSIENT as exc:
            self.renewal_failures += 1
            logger.warning("lease of %s not renewed (%s)", thread_id, exc)
            return False
        if self.held.get(thread_id) is lease:
            lease.revision, lease.renewed_at = revision, sent
            self.renewals += 1
        return True

    def _lose(self, thread_id: str, why: str, *, lapsed: bool = False) -> None:
        lease = self.held.pop(thread_id, None)
        if lease is None:
            return
        if lapsed:
            self.lapsed[thread_id] = lease.revision
        self.lost.add(thread_id)
        logger.warning("lease of thread %s lost: %s", thread_id, why)
        if self.on_lost is not None:
            self.on_lost(thread_id)

    async def run_renewer(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Renew every held lease each third of the TTL, until cancelled. A lease whose
        renewals failed past the TTL is given up (another runner may have it by now)."""
        task_status.started()
        limiter = trio.CapacityLimiter(64)  # renewals in flight at once (many threads)

        async def renew_one(thread_id: str) -> None:
            async with limiter:
                if not await self.renew(thread_id):
                    lease = self.held.get(thread_id)
                    if lease is not None and time.monotonic() - lease.renewed_at > self.ttl_s:
                        self._lose(thread_id, "not renewed within its TTL", lapsed=True)

        while True:
            await trio.sleep(self.ttl_s / 3)
            async with trio.open_nursery() as nursery:
                for thread_id in list(self.held):
                    nursery.start_soon(renew_one, thread_id)

    async def release(self, thread_id: str) -> None:
        """Give the lease up at once (a clean stop): the next runner need not wait."""
        lease = self.held.pop(thread_id, None)
        if lease is None:
            return
        try:
            await self.conn.call(self.bucket.delete, self.key(thread_id), last=lease.revision)
        except TRANSIENT as exc:
            logger.info("lease of %s not released (%s): it expires by itself", thread_id, exc)

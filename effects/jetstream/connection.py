"""One connection to NATS JetStream from trio: the stream and buckets Spindle uses, created
if missing, and every nats-py call crossed into asyncio.

nats-py is an asyncio client; Spindle is trio. ``open_jetstream`` runs a trio-asyncio loop
for the connection's life and ``JetStream.call`` wraps each call with ``aio_as_trio`` (a
bare ``await`` of a nats-py coroutine from trio fails). Names, in one place:

- stream ``SPINDLE``: subjects ``spindle.thread.<token>.log``, one per thread; file storage,
  one replica per node of the cluster (3 in production), direct gets allowed;
- KV bucket ``spindle_leases``: ``<token>`` -> the holder of the thread's lease; the
  bucket's TTL is the lease TTL (a key not renewed within it is gone);
- KV bucket ``spindle_snapshots``: ``<token>`` -> the thread's newest snapshot.

A thread id that is not a plain token (letters, digits, ``_``, ``-``) is written as ``=``
and its base64url: subjects may not hold ``.`` ``*`` ``>`` or spaces, KV keys less.
"""

from __future__ import annotations

import base64
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import nats
import trio
import trio_asyncio
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig, StreamInfo
from nats.js.errors import (
    BadRequestError,
    NoStreamResponseError,
    NotFoundError,
    ServiceUnavailableError,
)
from nats.js.kv import KeyValue

from threadspindle.effects.asyncio_loop import open_asyncio_loop
from threadspindle.effects.jetstream.stream_check import stream_problems, unusable

__all__ = [
    "LEASES_BUCKET",
    "SNAPSHOTS_BUCKET",
    "STREAM",
    "ClusterNotReady",
    "JetStream",
    "SignInRefused",
    "StoreUnusable",
    "bucket",
    "check_stream",
    "open_jetstream",
    "subject_of",
    "thread_token",
]

logger = logging.getLogger("spindle.jetstream")


class SignInRefused(ConnectionError):
    """The NATS servers refused this node's user and password."""


class ClusterNotReady(ConnectionError):
    """JetStream still could not place the stream or a bucket after every try: fewer
    nodes are up than the replicas asked for, or JetStream does not answer."""


class StoreUnusable(ConnectionError):
    """A stream or KV bucket exists with settings Spindle cannot use (``stream_check``)."""


def check_stream(
    name: str,
    config: StreamConfig,
    *,
    subjects: str,
    nc: Client,
    retentions: Collection[RetentionPolicy] = (RetentionPolicy.LIMITS,),
) -> None:
    """``StoreUnusable`` naming what in the existing stream ``name``'s ``config`` would
    strand or lose what goes through it (``stream_check.stream_problems``)."""
    problems = stream_problems(
        config, subjects=subjects, max_payload=nc.max_payload, retentions=retentions
    )
    if problems:
        raise StoreUnusable(unusable(name, problems))


STREAM = "SPINDLE"
SUBJECT_PREFIX = "spindle.thread."
LEASES_BUCKET = "spindle_leases"
SNAPSHOTS_BUCKET = "spindle_snapshots"

_PLAIN = re.compile(r"[A-Za-z0-9_-]{1,200}")
T = TypeVar("T")


def thread_token(thread_id: str) -> str:
    """The thread's token in subjects and KV keys (see the module doc)."""
    if _PLAIN.fullmatch(thread_id):
        return thread_id
    return "=" + base64.urlsafe_b64encode(thread_id.encode()).decode().rstrip("=")


def subject_of(thread_id: str) -> str:
    return f"{SUBJECT_PREFIX}{thread_token(thread_id)}.log"


@dataclass
class JetStream:
    """A live connection: the client, its JetStream context and the two buckets."""

    nc: Client
    js: JetStreamContext
    leases: KeyValue
    snapshots: KeyValue
    replicas: int
    lease_ttl_s: float

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Run one nats-py coroutine function from trio."""
        result: T = await trio_asyncio.aio_as_trio(fn)(*args, **kwargs)
        return result


_ENSURE_ATTEMPTS = 6  # of the stream's creation, each up to the API's 5 s
# A cluster just started is not ready at once, and says so in two ways: "no suitable peers
# for placement" (10005: a node is not current yet), or no answer from the JetStream API at
# all ("no responders": the API's interest is still crossing the routes, seen in a full
# test run with every node healthy). A stream or bucket is asked for again this often, this
# far apart: 5 s in all.
_NO_SUITABLE_PEERS = 10005
_PLACEMENT_TRIES = 20
_PLACEMENT_WAIT_S = 0.25
# nats-py reports "no responders" as ServiceUnavailableError from its API requests
# (add_stream) and as NoStreamResponseError from a publish.
_NO_RESPONDERS = (ServiceUnavailableError, NoStreamResponseError)


def _not_ready(exc: Exception) -> bool:
    """Whether JetStream refused because its cluster is not ready yet (see above)."""
    if isinstance(exc, _NO_RESPONDERS):
        return True
    return isinstance(exc, BadRequestError) and exc.err_code == _NO_SUITABLE_PEERS


async def once_found(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``fn(*args)`` (a stream's or a bucket's info), asked again while JetStream says the
    stream is not found. A replicated stream just made, by this process or by another one
    starting with it, is not found for a moment while its replicas elect their leader:
    ``spindle cluster dev`` starting two runners and a gateway on a loaded machine saw its
    runner stop on it at start (a full test run). It is found a moment later."""
    for attempt in range(_PLACEMENT_TRIES):
        try:
            result: T = await trio_asyncio.aio_as_trio(fn)(*args)
            return result
        except NotFoundError:
            if attempt + 1 == _PLACEMENT_TRIES:
                raise
            await trio.sleep(_PLACEMENT_WAIT_S)
    raise AssertionError("unreachable")  # the loop returns or raises


async def add_stream(js: JetStreamContext, **config: Any) -> StreamInfo | None:
    """Make the stream ``config["name"]``: None once it exists as asked, or the info of the
    stream that exists with another configuration (the caller judges it). A cluster not
    ready yet (``_not_ready``) is asked again, ``_PLACEMENT_TRIES`` times, as a bucket is; an
    API timeout, ``_ENSURE_ATTEMPTS`` times. Any other refusal is raised. (Taking "no
    suitable peers" for a stream that exists, the transport's streams once looked one up
    that did not, on a cluster just started: a full test run.)"""
    name = config["name"]
    timeouts = refusals = 0
    while True:
        try:
            await trio_asyncio.aio_as_trio(js.add_stream)(**config)
            return None
        except (BadRequestError, *_NO_RESPONDERS) as exc:
            if _not_ready(exc) and refusals + 1 < _PLACEMENT_TRIES:
                # Seen in full test runs on a loaded machine, as for the buckets: the
                # cluster is ready a moment later.
                refusals += 1
                await trio.sleep(_PLACEMENT_WAIT_S)
                continue
            if not isinstance(exc, BadRequestError) or exc.err_code == _NO_SUITABLE_PEERS:
                raise
        except nats.errors.TimeoutError:
            timeouts = _timed_out(timeouts, f"the {name} stream")
            continue
        info: StreamInfo = await once_found(js.stream_info, name)
        return info


def _not_ready_reason(exc: Exception, replicas: int, servers: int) -> str:
    """What to tell the operator when the cluster was still not ready after every try."""
    waited = f"after {_PLACEMENT_TRIES * _PLACEMENT_WAIT_S:g} s"
    if isinstance(exc, BadRequestError):
        return (
            f"JetStream cannot place the {STREAM} stream and its buckets on {replicas} "
            f"replicas {waited} ({exc.description}): are {replicas} nodes of the cluster "
            f"up? ({servers} server{'s' if servers != 1 else ''} given)"
        )
    return (
        f"JetStream did not answer {waited} (no responders): is JetStream enabled on the "
        "servers, and are most of the cluster's nodes up (2 of 3, 3 of 5)?"
    )


async def _ensure(nc: Client, replicas: int, lease_ttl_s: float) -> JetStream:
    js = nc.jetstream(timeout=5.0)
    existing = await add_stream(
        js,
        name=STREAM,
        subjects=[f"{SUBJECT_PREFIX}*.log"],
        storage=StorageType.FILE,
        num_replicas=replicas,
        allow_direct=True,
    )
    if existing is not None:
        # It exists with another configuration (made by hand, or by a runner asking for
        # fewer replicas): used as it is when the log can use it, else refused now rather
        # than found out later, as claims that hang or history that vanishes.
        check_stream(STREAM, existing.config, subjects=f"{SUBJECT_PREFIX}*.log", nc=nc)
        kept = existing.config.num_replicas or 1
        if kept < replicas:
            # Not refused: the log works, and a gateway or an export asks for as many
            # replicas as servers it was given, whatever the runners made.
            logger.warning(
                "the %s stream keeps %d replica(s) where %d were asked: it survives the "
                "loss of fewer nodes (nats stream edit %s --replicas %d)",
                STREAM,
                kept,
                replicas,
                STREAM,
                replicas,
            )
    leases = await bucket(js, LEASES_BUCKET, ttl=lease_ttl_s, replicas=replicas)
    snapshots = await bucket(js, SNAPSHOTS_BUCKET, replicas=replicas)
    # The bucket's TTL is the lease TTL, whatever this runner was told: the first runner
    # made the bucket, and every holder must judge its lease by the same clock.
    status = await once_found(leases.status)
    if not status.ttl:
        # Made by hand without one: a lease would never expire, and the threads of a
        # runner that stopped without releasing them would never be taken over.
        raise StoreUnusable(
            f"the {LEASES_BUCKET} bucket exists without a TTL: the threads of a runner that "
            "stops without releasing them would never be taken over. Remove it (nats kv rm "
            f"{LEASES_BUCKET}): Spindle makes it again with the lease TTL "
            f"({lease_ttl_s:g} s)"
        )
    actual = status.ttl
    if abs(actual - lease_ttl_s) > 1e-3:
        logger.warning(
            "lease TTL %.3g s asked, the leases bucket has %.3g s: using the bucket's",
            lease_ttl_s,
            actual,
        )
    return JetStream(nc, js, leases, snapshots, replicas, actual)


def _timed_out(timeouts: int, what: str) -> int:
    """One more API timeout making ``what`` (the stream, a bucket): the count, or, at the
    last attempt, the timeout raised again (called in its ``except`` clause). A cluster just
    started, on a loaded machine, may take longer than the API's 5 s to place a replicated
    stream or bucket (seen in full test runs, once each); asking again is safe: the same
    configuration answers with what exists."""
    timeouts += 1
    if timeouts >= _ENSURE_ATTEMPTS:
        raise  # (the TimeoutError being handled by the caller)
    logger.warning("nats took over 5 s to make %s: asking again", what)
    return timeouts


async def bucket(
    js: JetStreamContext, name: str, *, replicas: int, ttl: float | None = None
) -> KeyValue:
    """The KV bucket ``name``: created with these settings, or bound as it exists."""
    timeouts = 0
    for attempt in range(_PLACEMENT_TRIES):
        try:
            kv: KeyValue = await trio_asyncio.aio_as_trio(js.create_key_value)(
                bucket=name, ttl=ttl, history=1, replicas=replicas
            )
            return kv
        except nats.errors.TimeoutError:
            timeouts = _timed_out(timeouts, f"the {name} bucket")
            continue
        except (BadRequestError, *_NO_RESPONDERS) as exc:
            # The cluster not ready yet (see _not_ready): it is, a moment later.
            if _not_ready(exc) and attempt + 1 < _PLACEMENT_TRIES:
                await trio.sleep(_PLACEMENT_WAIT_S)
                continue
            if not isinstance(exc, BadRequestError) or exc.err_code == _NO_SUITABLE_PEERS:
                raise
            break  # it exists with other settings (another TTL, say): use it
    kv = await once_found(js.key_value, name)
    return kv


@asynccontextmanager
async def open_jetstream(
    servers: Sequence[str],
    *,
    replicas: int = 1,
    lease_ttl_s: float = 5.0,
    name: str = "spindle",
    connect_timeout_s: float = 5.0,
    user: str | None = None,
    password: str | None = None,
) -> AsyncIterator[JetStream]:
    """Connect (inside a trio-asyncio loop of its own) and make sure the stream and the
    buckets exist; closed on the way out. The client reconnects by itself, for ever, to
    any of ``servers`` while the block runs. ``user``/``password``: how it signs in (a URL
    may carry them too, ``nats://user:password@host:port``). Refused at the start, it raises
    a sentence for the operator, not an exception group: ``SignInRefused`` (the password),
    ``ClusterNotReady`` (still not ready after every try: fewer nodes up than replicas, or
    no quorum), ``StoreUnusable`` (the stream or a bucket exists with settings Spindle cannot
    use)."""

    refused: list[Exception] = []
    said_at = [-math.inf]  # when a refusal was last logged (the client retries 10 times/s)

    async def error_cb(exc: Exception) -> None:
        if "authorization violation" in str(exc).lower():
            # Not a server down for a moment: retrying would wait for ever, unexplained.
            refused.append(exc)
            del refused[:-1]
            now = time.monotonic()
            if now - said_at[0] >= 30.0:
                said_at[0] = now
                logger.error("nats refused the sign-in: %s", exc)
        else:
            logger.debug("nats: %s", exc)

    async with open_asyncio_loop():
        connect = trio_asyncio.aio_as_trio(nats.connect)
        nc: Client | None = None
        with trio.CancelScope() as refusal:
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    while not refused:
                        await trio.sleep(0.05)
                    refusal.cancel()

                nursery.start_soon(watch)
                nc = await connect(
                    servers=list(servers),
                    name=name,
                    error_cb=error_cb,
                    connect_timeout=connect_timeout_s,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=0.1,
                    allow_reconnect=True,
                    **({"user": user or "spindle", "password": password} if password else {}),
                )
                nursery.cancel_scope.cancel()
        not_ready: ConnectionError | None = None
        if nc is not None:
            refused.clear()  # from now on a refusal (a server's new password) is logged only
            try:
                try:
                    live = await _ensure(nc, replicas, lease_ttl_s)
                except StoreUnusable as exc:
                    not_ready = exc
                except (BadRequestError, *_NO_RESPONDERS) as exc:
                    if not _not_ready(exc):
                        raise
                    not_ready = ClusterNotReady(_not_ready_reason(exc, replicas, len(servers)))
                else:
                    yield live
            finally:
                await trio_asyncio.aio_as_trio(nc.close)()
    if not_ready is not None:
        # Raised here for the reason SignInRefused is (below): a sentence, not a group.
        raise not_ready
    if nc is None:
        # Raised outside the asyncio loop's block, whose nursery would wrap it in groups.
        raise SignInRefused(
            f"the NATS servers refused user {user or 'spindle'!r} "
            f"({'with' if password else 'without'} a password): set "
            "SPINDLE_CLUSTER__PASSWORD (or [cluster] password) to the servers' one"
        )

"""Actions to a thread's owner and effects to the gateway, through JetStream streams read by
durable consumers with explicit acks. Both streams are work queues: a message is deleted
once its consumer acked it (each consumer's filter is its own, a root's or a home's).

- stream ``SPINDLE_IN``, subjects ``spindle.in.<root token>.<thread token>``: actions for
  the runner that owns the workdir root. Published with ``Nats-Msg-Id: <action id>`` (a
  sender's retry within the duplicate window is stored once). The owning runner reads them
  through the durable consumer ``root-<root token>`` and acks each once its action is in
  the thread's log (or was refused with a reply): at least once, and a redelivered action
  is dropped by its action id (``runner.py``).
- stream ``SPINDLE_OUT``, subjects ``spindle.out.<home>.<thread token>``: the chat effects
  of every thread, for the gateway holding the thread's *home* (``discord-<shard id>``,
  ``telegram``, ``slack``, ``console``): a gateway reads the homes it holds through one
  durable consumer each (``gw-<home>``), or every home through one consumer (``gateway``:
  the tests and the bench), and acks each effect once applied. A
  redelivered effect is harmless: the renderer posts a key once (it knows the keys it
  posted, and a restarted gateway seeds them from the thread's log).
- KV ``spindle_routes``: ``<thread token>`` -> the root token the thread's conversation
  lives under, written by whoever starts a conversation (the gateway, or a test): the
  gateway holds no thread state, only where to send.
- KV ``spindle_homes``: ``<thread token>`` -> the thread's home, written by the gateway
  that sends the thread's actions (each action also carries it in the ``Spindle-Home``
  header, which the runner remembers): where the runner publishes the thread's effects. A
  thread with no home is ``console``'s.
- KV ``spindle_root_leases``: ``root.<root token>`` -> the runner serving that root (one at
  a time; standbys wait for the key).
- core NATS ``spindle.open.<home>`` (request and reply, not stored): a runner asks the
  gateway holding a thread's home to open a new chat thread beside it (``/fork``,
  ``/btw``: ``open_thread``); the gateway answers with the new thread's id and label, or
  an error, after routing the new thread to the source's root and homing it with itself.
  The runner then seeds it through ``SPINDLE_IN`` like any action (``forward``), so the
  runner of that root claims it as it would a thread a gateway started.
- core NATS ``spindle.dispose.<root token>`` (request and reply, not stored): a gateway
  whose chat thread was archived or deleted asks the runner serving the thread's root to
  stop the thread's actor and agent now (``dispose``), as ``spindle run`` does, instead of
  leaving them to the runner's idle sweeper.
- KV ``spindle_posted``: ``<thread token>`` -> the thread's last posts (output key ->
  message ids, at most ``RECENT_POSTS``), stored right after each post and before
  ``OutputPosted`` is sent or the effect acked: a restarted gateway knows a post even when
  the runner has not logged its ``OutputPosted`` yet (the log has the older ones). One key
  per thread, read with one get: a KV watch per thread would make a JetStream consumer
  each, and 1,000 threads at once hit the server's consumer limit (measured).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
import trio
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType
from nats.js.errors import APIError, BadRequestError, KeyNotFoundError
from nats.js.kv import KeyValue
from pydantic import TypeAdapter

from threadspindle.effects.jetstream.connection import (
    JetStream,
    StoreUnusable,
    add_stream,
    bucket,
    check_stream,
    once_found,
    thread_token,
)
from threadspindle.effects.jetstream.stream_check import kv_problems, subjects_overlap, unusable
from threadspindle.runtime.core.actions import Action
from threadspindle.runtime.core.effect_types import Effect
from threadspindle.runtime.live.log_read import ACTION_ADAPTER
from threadspindle.runtime.live.ports import OnPosted, Posted

__all__ = [
    "answer_requests",
    "CHANNEL_HEADER",
    "DEFAULT_HOME",
    "EFFECT_ADAPTER",
    "HOME_HEADER",
    "INBOX_ACK_WAIT_S",
    "DISPOSE_SUBJECT",
    "OPEN_SUBJECT",
    "OPEN_TIMEOUT_S",
    "IN_STREAM",
    "OUT_STREAM",
    "POSTED_BUCKET",
    "Inbox",
    "RemoteRenderer",
    "Transport",
    "open_transport",
    "root_token",
]

logger = logging.getLogger("spindle.transport")

IN_STREAM = "SPINDLE_IN"
OUT_STREAM = "SPINDLE_OUT"
POSTED_BUCKET = "spindle_posted"
HOMES_BUCKET = "spindle_homes"
ROUTES_BUCKET = "spindle_routes"
ROOT_LEASES_BUCKET = "spindle_root_leases"
_CONSUMER_NOT_UNIQUE = 10100  # "filtered consumer not unique on workqueue stream"
HOME_HEADER = "Spindle-Home"
CHANNEL_HEADER = "Spindle-Channel"  # the chat channel of the action (``Runtime.post``)
DEFAULT_HOME = "console"
# How long an action fetched by a runner stays its runner's before JetStream gives it to
# another fetch: a runner killed (or losing its root) with an action in hand delays that
# action this long. Storing an action takes milliseconds; a copy that comes again while the
# first is still being stored is held back by the runner (``_Runner.settling``).
INBOX_ACK_WAIT_S = 5.0
# How long an effect fetched by a gateway stays its gateway's without news from it. A
# gateway keeps what it is still applying in hand (``Inbox.keep_in_hand``, every third of
# this), so this is how long a gateway that died delays what it held, and how long the
# gateway started after it waits before it fetches (``Inbox.wait_for_unacked``).
GATEWAY_ACK_WAIT_S = 10.0
OPEN_SUBJECT = "spindle.open.{home}"  # a new chat thread, asked of the home's gateway
# A gateway opens a thread with one or two platform calls; the budget may hold them behind
# a few seconds of streamed edits (they go as replies, ahead of the edits).
OPEN_TIMEOUT_S = 30.0
DISPOSE_SUBJECT = "spindle.dispose.{root}"  # stop a thread's actor, asked of its root's runner
# A runner drains a thread's effects for up to 10 s before it stops it (Runtime.dispose).
DISPOSE_TIMEOUT_S = 15.0
EFFECT_ADAPTER: TypeAdapter[Effect] = TypeAdapter(Effect)


def root_token(root: str) -> str:
    """The token of a workdir root (its path) in subjects and keys."""
    return thread_token(root)


@dataclass
class Inbox:
    """One durable pull consumer: ``fetch`` a batch, ``ack`` / ``nak`` each message.

    What was fetched and not yet acked or nak'd is *in hand*. ``keep_in_hand`` tells
    JetStream (``in_progress``) that the holder is still at it, so a message applied slowly
    (a chat platform's rate limit) is not delivered again meanwhile; ``wait_for_unacked``
    lets a consumer's new reader wait until what a dead reader held is due again."""

    conn: JetStream
    subscription: Any
    stream: str = ""
    durable: str = ""
    ack_wait_s: float = GATEWAY_ACK_WAIT_S
    in_hand: dict[int, Msg] = field(default_factory=dict)

    async def fetch(self, batch: int = 64, timeout_s: float = 1.0) -> list[Msg]:
        import nats.errors

        try:
            msgs: list[Msg] = await self.conn.call(
                self.subscription.fetch, batch=batch, timeout=timeout_s
            )
        except (nats.errors.TimeoutError, TimeoutError):  # nothing waiting (either kind)
            return []
        for msg in msgs:
            self.in_hand[id(msg)] = msg
        return msgs

    async def ack(self, msg: Msg) -> None:
        try:
            await self.conn.call(msg.ack)
        finally:  # an ack that failed: let JetStream deliver it again, never keep it
            self.in_hand.pop(id(msg), None)

    async def nak(self, msg: Msg, delay_s: float = 1.0) -> None:
        try:
            await self.conn.call(msg.nak, delay=delay_s)
        finally:
            self.in_hand.pop(id(msg), None)

    async def keep_in_hand(self) -> None:
        """Until cancelled: every third of the ack wait, reset the ack timer of each message
        in hand. A failed reset is logged and tried again next time (the message may come
        again meanwhile: the redelivery is harmless, only later)."""
        while True:
            await trio.sleep(self.ack_wait_s / 3)
            for msg in list(self.in_hand.values()):
                try:
                    await self.conn.call(msg.in_progress)
                except Exception as exc:  # the connection is down: JetStream decides
                    logger.warning("could not keep an effect in hand: %s", exc)
                    break

    async def wait_for_unacked(self) -> int:
        """If the consumer has messages delivered and never acked (a reader that died with
        them in hand), wait until they are due again, so the next fetch gets them before
        anything newer: a pull consumer delivers what is due again first, in stream order.
        Returns how many there were."""
        info = await self.conn.call(self.conn.js.consumer_info, self.stream, self.durable)
        pending = int(info.num_ack_pending or 0)
        if pending:
            # The ack wait counts from their last delivery, before this reader existed; the
            # server's expiry check may run a little after it.
            await trio.sleep(self.ack_wait_s + 0.5)
        return pending


@dataclass
class Transport:
    conn: JetStream
    routes: KeyValue
    root_leases: KeyValue
    posted: KeyValue
    homes: KeyValue
    _home_of: dict[str, str] = field(default_factory=dict)  # thread id -> its home (cache)

    def note_home(self, thread_id: str, home: str | None) -> None:
        """What an action's ``Spindle-Home`` header says (the runner's side)."""
        if home:
            self._home_of[thread_id] = home

    async def set_home(self, thread_id: str, home: str) -> None:
        """Make ``home`` the thread's (``spindle_homes``), once per change in this process."""
        if self._home_of.get(thread_id) != home:
            await self.conn.call(self.homes.put, thread_token(thread_id), home.encode())
            self._home_of[thread_id] = home

    async def home_of(self, thread_id: str) -> str:
        """Where the thread's effects go: as last noted, else ``spindle_homes``, else the
        console's home."""
        home = self._home_of.get(thread_id)
        if home is None:
            try:
                entry = await self.conn.call(self.homes.get, thread_token(thread_id))
                home = entry.value.decode() if entry.value else DEFAULT_HOME
            except KeyNotFoundError:
                home = DEFAULT_HOME
            self._home_of[thread_id] = home
        return home

    async def record_posted(self, thread_id: str, posted: dict[str, tuple[str, ...]]) -> None:
        """Store the thread's recent posts (``spindle_posted``): key -> message ids."""
        await self.conn.call(
            self.posted.put,
            thread_token(thread_id),
            orjson.dumps({key: list(ids) for key, ids in posted.items()}),
        )

    async def posted_of(self, thread_id: str) -> dict[str, tuple[str, ...]]:
        """The thread's recent posts recorded in ``spindle_posted`` (oldest first)."""
        try:
            entry = await self.conn.call(self.posted.get, thread_token(thread_id))
        except KeyNotFoundError:
            return {}
        raw = orjson.loads(entry.value or b"{}")
        return {str(key): tuple(str(i) for i in ids) for key, ids in raw.items()}

    async def entries(self, kv: KeyValue) -> dict[str, bytes]:
        """Every key of a bucket with its value, read through one watch (a get per key would
        be a round trip each: thousands of threads at a gateway's start)."""
        return await self.conn.call(_all_entries, kv)

    async def route(self, thread_id: str, root: str) -> None:
        """Record that the thread's conversation lives under ``root``."""
        await self.conn.call(self.routes.put, thread_token(thread_id), root.encode())

    async def root_of(self, thread_id: str) -> str | None:
        try:
            entry = await self.conn.call(self.routes.get, thread_token(thread_id))
        except KeyNotFoundError:
            return None
        return entry.value.decode() if entry.value else None

    async def send_action(
        self, root: str, action: Action, *, home: str | None = None, channel: str | None = None
    ) -> int:
        """Publish an action for the runner of ``root``; its stream sequence once stored.
        ``home``: the gateway that sends it holds the thread's effects (header);
        ``channel``: the chat channel it came from (a project channel's own policy)."""
        subject = f"spindle.in.{root_token(root)}.{thread_token(action.thread_id)}"
        headers = {"Nats-Msg-Id": action.action_id}
        if home:
            headers[HOME_HEADER] = home
        if channel:
            headers[CHANNEL_HEADER] = channel
        for attempt in range(200):
            try:
                ack = await self.conn.call(
                    self.conn.js.publish,
                    subject,
                    action.model_dump_json().encode(),
                    headers=headers,
                )
                return int(ack.seq)
            except APIError as exc:
                # 10158: the same id is being stored by another publish right now (two
                # reports of one post): once stored, this one is answered as a duplicate.
                if exc.err_code != 10158 or attempt == 199:
                    raise
                await trio.sleep(0.05)
        raise AssertionError("unreachable")

    async def open_thread(
        self, source_thread_id: str, title: str, *, timeout_s: float = OPEN_TIMEOUT_S
    ) -> tuple[str, str]:
        """A runner's ``thread_opener``: the gateway of the source thread's home opens a chat
        thread beside it (``spindle.open.<home>``); its id and label. Raises, with a
        sentence a user can read, when no gateway holds the home or it cannot open one."""
        import nats.errors

        home = await self.home_of(source_thread_id)
        body = orjson.dumps({"source": source_thread_id, "title": title})
        try:
            msg = await self.conn.call(
                self.conn.nc.request, OPEN_SUBJECT.format(home=home), body, timeout=timeout_s
            )
        except nats.errors.NoRespondersError:
            raise RuntimeError(f"no gateway holds {home} now; try again once it is back") from None
        except (nats.errors.TimeoutError, TimeoutError):
            raise RuntimeError(
                f"the gateway holding {home} did not answer within {timeout_s:g} s"
            ) from None
        answer = orjson.loads(msg.data)
        if not isinstance(answer, dict) or "error" in answer:
            error = answer.get("error") if isinstance(answer, dict) else None
            raise RuntimeError(str(error or "the gateway could not open a thread"))
        return str(answer["thread_id"]), str(answer["label"])

    async def forward(self, action: Action) -> int:
        """A runner's ``post_elsewhere``: an action for another thread (a fork's seed) goes
        to the runner of that thread's root, with its home, as a gateway would send it."""
        root = await self.root_of(action.thread_id)
        if root is None:
            raise LookupError(f"thread {action.thread_id} is routed to no root")
        home = await self.home_of(action.thread_id)
        return await self.send_action(root, action, home=home)

    async def dispose(self, thread_id: str, *, timeout_s: float = DISPOSE_TIMEOUT_S) -> bool:
        """A gateway's ``dispose``: the runner serving the thread's root stops its actor and
        agent (``spindle.dispose.<root>``). True if one was running; False when the thread
        has no root, no runner serves it now (nothing runs there then), or none answered."""
        import nats.errors

        root = await self.root_of(thread_id)
        if root is None:
            return False
        subject = DISPOSE_SUBJECT.format(root=root_token(root))
        try:
            msg = await self.conn.call(
                self.conn.nc.request, subject, thread_id.encode(), timeout=timeout_s
            )
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError, TimeoutError):
            return False
        return bool(orjson.loads(msg.data).get("disposed"))

    async def send_effect(self, thread_id: str, effect: Effect) -> None:
        body = EFFECT_ADAPTER.dump_json(effect)
        digest = hashlib.blake2b(body, digest_size=12).hexdigest()
        home = await self.home_of(thread_id)
        await self.conn.call(
            self.conn.js.publish,
            f"spindle.out.{home}.{thread_token(thread_id)}",
            orjson.dumps({"thread_id": thread_id})[:-1] + b',"effect":' + body + b"}",
            headers={"Nats-Msg-Id": f"{thread_token(thread_id)}/{digest}"},
        )

    async def inbox(self, root: str) -> Inbox:
        """The durable consumer of the root's actions (created if missing)."""
        token = root_token(root)
        durable = f"root-{token}".replace("=", "_")
        return await self._pull(f"spindle.in.{token}.*", durable, IN_STREAM, INBOX_ACK_WAIT_S)

    async def outbox(
        self,
        name: str = "gateway",
        *,
        home: str | None = None,
        ack_wait_s: float = GATEWAY_ACK_WAIT_S,
    ) -> Inbox:
        """A gateway's durable consumer of the effects of one home's threads, or of every
        thread (``home`` None). An effect not acked within ``ack_wait_s``, say by a gateway
        that died, is delivered again."""
        subject = "spindle.out.>" if home is None else f"spindle.out.{home}.*"
        return await self._pull(subject, name, OUT_STREAM, ack_wait_s)

    async def _pull(self, subject: str, durable: str, stream: str, ack_wait_s: float) -> Inbox:
        """A durable pull consumer, created if missing. One that exists keeps its settings
        (nats-py only reads it), so an ack wait other than ``ack_wait_s`` (made by an
        earlier version, or under another ``--ack-wait``) is changed in place: JetStream
        lets a durable consumer's ack wait be edited."""
        try:
            sub = await self.conn.call(
                self.conn.js.pull_subscribe,
                subject,
                durable=durable,
                stream=stream,
                config=ConsumerConfig(
                    ack_policy=AckPolicy.EXPLICIT, ack_wait=ack_wait_s, max_ack_pending=10_000
                ),
            )
        except BadRequestError as exc:
            if exc.err_code != _CONSUMER_NOT_UNIQUE:
                raise
            raise StoreUnusable(await self._overlapping(stream, durable, subject)) from None
        info = await self.conn.call(self.conn.js.consumer_info, stream, durable)
        if info.config.ack_wait != ack_wait_s:
            config = replace(info.config, ack_wait=ack_wait_s)
            await self.conn.call(self.conn.js.add_consumer, stream, config=config)
        return Inbox(self.conn, sub, stream=stream, durable=durable, ack_wait_s=ack_wait_s)

    async def _overlapping(self, stream: str, durable: str, subject: str) -> str:
        """Why a work queue refused the consumer: the consumers whose filters overlap it
        (a gateway of every home left from a test, say, beside one of a home)."""
        infos = await self.conn.call(self.conn.js.consumers_info, stream)
        others = [
            f"{info.name} ({' '.join(filters)})"
            for info in infos
            if info.name != durable
            and (filters := _filters(info.config))
            and any(subjects_overlap(f, subject) for f in filters)
        ]
        first = others[0].split(" ", 1)[0] if others else "NAME"
        return (
            f"the consumer {durable} of the {stream} stream ({subject}) would take messages "
            f"that {', '.join(others) or 'another consumer'} takes too, and a work queue gives "
            "each message to one consumer: remove the one no gateway or runner uses any more "
            f"(nats consumer rm {stream} {first})"
        )


def _filters(config: ConsumerConfig) -> list[str]:
    if config.filter_subjects:
        return list(config.filter_subjects)
    return [config.filter_subject or ">"]


async def answer_requests(
    conn: JetStream,
    subjects: Sequence[str],
    queue: str,
    answer: Callable[[str, bytes], Awaitable[dict[str, Any]]],
    *,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Answer core NATS requests on ``subjects`` until cancelled (started once subscribed),
    each in a task of its own, so a slow one holds up no other: ``answer(subject, data)``
    gives the reply; one that raises is answered ``{"error": ...}``. One queue group: were
    two nodes to serve a subject, one answers each request."""
    import nats.errors

    subscriptions = [await conn.call(conn.nc.subscribe, s, queue=queue) for s in subjects]

    async def one(msg: Msg) -> None:
        try:
            reply = await answer(msg.subject, msg.data)
        except Exception as exc:
            logger.warning("a request on %s failed: %s", msg.subject, exc)
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        try:
            await conn.call(msg.respond, orjson.dumps(reply))
        except Exception as exc:  # the asker gave up waiting, or the link is down
            logger.warning("could not answer a request on %s: %s", msg.subject, exc)

    async def serve(subscription: Any, nursery: trio.Nursery) -> None:
        while True:
            try:
                msg = await conn.call(subscription.next_msg, timeout=None)
            except (nats.errors.TimeoutError, TimeoutError):
                continue
            nursery.start_soon(one, msg)

    try:
        async with trio.open_nursery() as nursery:
            for subscription in subscriptions:
                nursery.start_soon(serve, subscription, nursery)
            task_status.started()
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(2):
            for subscription in subscriptions:
                await conn.call(subscription.unsubscribe)


async def _all_entries(kv: KeyValue) -> dict[str, bytes]:
    """(asyncio side) The bucket's current entries; the watcher marks their end with None."""
    watcher = await kv.watchall(ignore_deletes=True)
    found: dict[str, bytes] = {}
    try:
        async for entry in watcher:
            if entry is None:
                break
            if entry.value:
                found[entry.key] = entry.value
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]
    return found


def decode_action(msg: Msg) -> Action:
    return ACTION_ADAPTER.validate_json(msg.data)


def decode_effect(msg: Msg) -> tuple[str, Effect]:
    raw = orjson.loads(msg.data)
    return str(raw["thread_id"]), EFFECT_ADAPTER.validate_python(raw["effect"])


async def open_transport(conn: JetStream) -> Transport:
    """Make sure the two streams and the four buckets exist, with settings Spindle can use
    (``stream_check``: ``StoreUnusable`` otherwise)."""
    for name, subjects in ((IN_STREAM, ["spindle.in.*.*"]), (OUT_STREAM, ["spindle.out.*.*"])):
        # A work queue: a message is deleted once its consumer acked it. Nothing reads an
        # action or an effect again once it is in the log or applied, and a stream keeping
        # them all would grow with every delta for as long as the cluster lives (each
        # consumer's filter is its own: a root's, a home's).
        info = await add_stream(
            conn.js,
            name=name,
            subjects=subjects,
            storage=StorageType.FILE,
            num_replicas=conn.replicas,
            retention=RetentionPolicy.WORK_QUEUE,
            duplicate_window=120.0,
        )
        if info is not None:
            # It exists with other settings: used as it is unless they would strand or
            # lose what goes through it (``stream_check``).
            check_stream(
                name,
                info.config,
                subjects=subjects[0],
                nc=conn.nc,
                retentions=(RetentionPolicy.WORK_QUEUE, RetentionPolicy.LIMITS),
            )
            if info.config.retention in (RetentionPolicy.LIMITS, RetentionPolicy.LIMITS.value):
                # Made by an earlier Spindle: it works, but JetStream cannot make an
                # existing stream a work queue.
                logger.warning(
                    "the %s stream keeps every message, acked or not (limits retention, "
                    "made by an earlier Spindle): it grows for as long as the cluster "
                    "lives. While no runner and no gateway runs, remove it (nats stream rm "
                    "%s; unacked messages go with it) and the next start makes it a work "
                    "queue, deleting each message once acked",
                    name,
                    name,
                )
    routes = await bucket(conn.js, ROUTES_BUCKET, replicas=conn.replicas)
    # Root leases share the thread leases' TTL (``Leases`` judges both by ``lease_ttl_s``).
    root_leases = await bucket(
        conn.js, ROOT_LEASES_BUCKET, ttl=conn.lease_ttl_s, replicas=conn.replicas
    )
    posted = await bucket(conn.js, POSTED_BUCKET, ttl=7 * 24 * 3600.0, replicas=conn.replicas)
    homes = await bucket(conn.js, HOMES_BUCKET, replicas=conn.replicas)
    # Routes and homes must outlive every thread, root leases expire with the leases'
    # TTL; the posted bucket is a cache, so any settings of its own do.
    for name, kv, ttl in (
        (ROUTES_BUCKET, routes, None),
        (HOMES_BUCKET, homes, None),
        (ROOT_LEASES_BUCKET, root_leases, conn.lease_ttl_s),
    ):
        status = await once_found(kv.status)
        problems = kv_problems(status.stream_info.config, ttl=ttl)
        if problems:
            raise StoreUnusable(unusable(f"KV_{name}", problems, bucket=name))
    return Transport(conn, routes, root_leases, posted, homes)


class RemoteRenderer:
    """A thread's ``RendererPort`` on a runner: every chat effect goes to the gateway over
    ``SPINDLE_OUT`` (the gateway's renderer posts it and reports ``OutputPosted`` back
    through the thread's inbox). ``apply`` returns once JetStream stored the effect."""

    def __init__(self, transport: Transport, thread_id: str) -> None:
        self.transport = transport
        self.thread_id = thread_id
        self.on_posted: OnPosted | None = None
        self.sent = 0

    def known(self, key: str, message_ids: tuple[str, ...]) -> None:
        """The gateway seeds its renderer from the log itself."""

    async def apply(self, effect: Effect) -> list[Posted]:
        await self.transport.send_effect(self.thread_id, effect)
        self.sent += 1
        return []

    async def aclose(self) -> list[Posted]:
        return []


def remote_renderers(transport: Transport) -> Callable[[str], RemoteRenderer]:
    return lambda thread_id: RemoteRenderer(transport, thread_id)

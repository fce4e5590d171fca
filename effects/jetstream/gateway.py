"""A gateway node's two jobs over JetStream: send chat events to the runner of the thread's
root, and apply the effects runners publish.

- ``Gateway.send`` publishes an action to ``spindle.in.<root>.<thread>``: the root is the one
  recorded for the thread (``spindle_routes``), set when a conversation starts under it
  (``start``). The action is accepted once JetStream stored it.
- ``serve_effects`` reads ``SPINDLE_OUT`` through the durable consumer ``gateway``: for each
  effect, the thread's renderer (made on first use and seeded with every output the
  thread's log or ``spindle_posted`` knows as posted, so a restarted gateway never posts a
  known key twice) applies it; each post is recorded in ``spindle_posted`` and then goes
  back to the thread's runner as ``OutputPosted`` (its action id is derived from the key
  and message ids, so a resend is dropped as a duplicate); the effect is acked after that.
  What is fetched and not yet acked is kept in hand (``Inbox.keep_in_hand``), however
  long the chat platform holds it up. A gateway started on a consumer that a dead one left
  effects unacked on waits until they are due again before it fetches (``Inbox.
  wait_for_unacked``): they come first, so each thread's effects stay in order.
  An effect redelivered after a gateway crash whose key is known as posted is acked
  without applying it. A post recorded but never reported (the gateway died in between)
  is reported when the thread's renderer is made again.

- A thread's renderer unused for ``IDLE_RENDERER_S`` with nothing left to send is let go,
  with what the gateway kept of the thread's posts; the thread's next effect makes it again
  from the log and ``spindle_posted``, as after a restart.
- ``serve_thread_opening`` answers runners' requests to open a chat thread beside one of
  the homes it holds (``/fork``, ``/btw``; ``Transport.open_thread``): the platform opens
  it, and the new thread is routed to the source's root and homed here before the answer
  goes back, so the runner's seed of it and its effects find their way.

The one window left is between a post and its record: a gateway that dies there leaves the
effect in hand unacked, and the next gateway sends it again. On Discord that is the same
message (the send's nonce is the output key and the message's place in it; Discord answers
a repeated nonce with the first message); on platforms without an idempotency key it is
posted again. An ``AppendOutput`` in hand is appended again (edits that set text are
harmless). Measured by tests/effects/jetstream/
test_jetstream_gateway.py; docs/scale-out.md.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
import trio
from nats.aio.msg import Msg

from threadspindle.effects.jetstream.connection import JetStream
from threadspindle.effects.jetstream.subject_read import load_thread
from threadspindle.effects.jetstream.transport import (
    GATEWAY_ACK_WAIT_S,
    OPEN_SUBJECT,
    Inbox,
    Transport,
    answer_requests,
    decode_effect,
)
from threadspindle.effects.render import StreamRenderer
from threadspindle.runtime.core.actions import Action, OutputPosted
from threadspindle.runtime.core.effect_types import KEYED_POSTS, Effect, SealOutput
from threadspindle.runtime.live.ports import (
    Posted,
    RendererFactory,
    RendererPort,
    ThreadOpener,
)

__all__ = ["Gateway"]

logger = logging.getLogger("spindle.gateway")

# Posts kept per thread in spindle_posted: the ones whose OutputPosted the runner may not
# have logged yet (it logs them within a flush round; 64 is many rounds of posts).
RECENT_POSTS = 64
# A thread's renderer unused this long, with nothing left to send, is let go (made again
# from the log when the thread's next effect comes): a gateway's memory follows the threads
# it serves now, not every thread it ever served.
IDLE_RENDERER_S = 1800.0
EVICTED_REMEMBERED = 100_000  # threads whose renderer was let go (bounded)


class Gateway:
    def __init__(self, conn: JetStream, transport: Transport, renderers: RendererFactory) -> None:
        self.conn = conn
        self.transport = transport
        self._factory = renderers
        self.renderers: dict[str, RendererPort] = {}
        self._roots: dict[str, str] = {}
        self._late: list[tuple[str, str, tuple[str, ...]]] = []  # posted outside apply
        self._late_wake = trio.Event()
        self.posted_keys: dict[str, set[str]] = {}
        self._recent: dict[str, dict[str, tuple[str, ...]]] = {}  # as in spindle_posted
        self.applied = 0
        # Told the thread of each effect applied (a chat gateway refreshes its view of it).
        self.on_applied: Callable[[str], object] | None = None
        # Called with each renderer made and what is known posted in its thread: a chat
        # gateway continues there the outputs a dead gateway left streaming.
        self.on_renderer: (
            Callable[[str, RendererPort, dict[str, tuple[str, ...]]], Awaitable[list[Posted]]]
            | None
        ) = None
        self.failed = 0
        self.skipped = 0  # redelivered posts of keys already posted
        self.idle_renderer_s = IDLE_RENDERER_S
        self.evicted = 0  # renderers let go, idle
        self._used: dict[str, float] = {}  # thread -> when its renderer was last used
        self._serving: set[str] = set()  # threads whose effects are being applied now
        # Threads let go idle (not by a crash): a renderer made again for them has nothing
        # to continue, so ``on_renderer`` (which re-shows a dead gateway's last outputs,
        # an edit each) is skipped.
        self._evicted: OrderedDict[str, None] = OrderedDict()
        self._outboxes: list[Inbox] = []  # the consumers served (serve_effects)
        self._draining = False  # stopping: no more fetches (drain)
        self._fetching = 0  # fetches in flight

    async def start(
        self, root: str, action: Action, *, home: str | None = None, channel: str | None = None
    ) -> None:
        """Route the thread to ``root`` and send its first action (``ConversationStarted``)."""
        await self.transport.route(action.thread_id, root)
        self._roots[action.thread_id] = root
        await self.send(action, home=home, channel=channel)

    async def send(
        self, action: Action, *, home: str | None = None, channel: str | None = None
    ) -> None:
        """Send an action to the runner of the thread's root. ``home``: this gateway holds
        the thread's chat connection (``discord-<shard>``, ...): its effects come here;
        ``channel``: the chat channel it came from."""
        root = self._roots.get(action.thread_id) or await self.transport.root_of(action.thread_id)
        if root is None:
            raise LookupError(f"thread {action.thread_id} has no root: start it first")
        self._roots[action.thread_id] = root
        if home is not None:
            await self.transport.set_home(action.thread_id, home)
        await self.transport.send_action(root, action, home=home, channel=channel)

    async def renderer(self, thread_id: str) -> RendererPort:
        renderer = self.renderers.get(thread_id)
        if renderer is None:
            renderer = self._factory(thread_id)
            renderer.on_posted = lambda key, ids: self._posted_late(thread_id, key, ids)
            loaded = await load_thread(self.conn, thread_id)
            # What the log says was posted, and what an earlier gateway recorded as posted
            # whose OutputPosted the runner had not logged yet.
            recorded = await self.transport.posted_of(thread_id)
            self._recent[thread_id] = dict(recorded)
            posted = {**recorded, **loaded.posted}
            for key, message_ids in posted.items():
                renderer.known(key, message_ids)
            self.posted_keys[thread_id] = set(posted)
            self.renderers[thread_id] = renderer
            for key in recorded.keys() - loaded.posted.keys():
                # Posted and recorded by a gateway that died before its OutputPosted was
                # stored (or logged): sent again, a duplicate id if it was.
                await self.report(thread_id, key, recorded[key])
            was_evicted = thread_id in self._evicted
            self._evicted.pop(thread_id, None)
            if self.on_renderer is not None and not was_evicted:
                for key, message_ids in await self.on_renderer(thread_id, renderer, posted):
                    await self.report(thread_id, key, message_ids)
        self._used[thread_id] = trio.current_time()
        return renderer

    async def drain(self, timeout_s: float = 10.0) -> int:
        """Fetch no more effects, and wait (at most ``timeout_s``) until those in hand are
        applied and acked: a gateway stopped this way leaves nothing for the next one to
        wait for. Returns how many were still in hand when it gave up."""
        self._draining = True
        with trio.move_on_after(timeout_s):
            while self._fetching or any(outbox.in_hand for outbox in self._outboxes):
                await trio.sleep(0.05)
        return sum(len(outbox.in_hand) for outbox in self._outboxes)

    async def tell(self, thread_id: str, effect: Effect) -> None:
        """Show an effect no runner sent (the gateway's own refusal of a conversation no
        runner serves) with the thread's renderer if it has one, so it is not replaced
        under the effects still coming (a platform's renderers retire a thread's renderer
        when another is made for it); else with one made for it alone and closed after it
        (so a platform's renderers let it go: a refusal in each of many threads keeps
        nothing)."""
        renderer = self.renderers.get(thread_id)
        if renderer is not None:
            await renderer.apply(effect)
            return
        renderer = self._factory(thread_id)
        await renderer.apply(effect)
        await renderer.aclose()

    async def _evict_idle(self) -> None:
        """Let go of renderers unused for ``idle_renderer_s`` with nothing left to send."""
        while True:
            await trio.sleep(min(60.0, self.idle_renderer_s / 4))
            now = trio.current_time()
            for thread_id, renderer in list(self.renderers.items()):
                if thread_id in self._serving:
                    continue
                if now - self._used.get(thread_id, now) < self.idle_renderer_s:
                    continue
                statistics = getattr(renderer, "statistics", None)
                if statistics is not None and statistics().dirty_messages:
                    continue  # paced edits still to make: not idle
                del self.renderers[thread_id]
                self._used.pop(thread_id, None)
                self.posted_keys.pop(thread_id, None)
                self._recent.pop(thread_id, None)
                self._evicted[thread_id] = None
                while len(self._evicted) > EVICTED_REMEMBERED:
                    self._evicted.popitem(last=False)
                self.evicted += 1
                try:
                    with trio.move_on_after(10):
                        for key, message_ids in await renderer.aclose():
                            await self.report(thread_id, key, message_ids)
                except Exception as exc:
                    logger.warning("closing the idle renderer of %s: %s", thread_id, exc)

    def _posted_late(self, thread_id: str, key: str, message_ids: tuple[str, ...]) -> None:
        """A post a paced renderer made in the background (a chat platform's
        ``StreamRenderer``): reported at once by ``_report_late``, not when the thread's
        next effect comes, so the window in which a gateway that dies leaves a post
        unrecorded (and posted again after) stays a KV write long."""
        self._late.append((thread_id, key, message_ids))
        self._late_wake.set()

    async def _report_late(self) -> None:
        while True:
            await self._late_wake.wait()
            self._late_wake = trio.Event()
            late, self._late = self._late, []
            for thread_id, key, message_ids in late:
                await self.report(thread_id, key, message_ids)

    async def report(self, thread_id: str, key: str, message_ids: tuple[str, ...]) -> None:
        """Record the post (``spindle_posted``) and send ``OutputPosted`` to the runner."""
        self.posted_keys.setdefault(thread_id, set()).add(key)
        recent = self._recent.setdefault(thread_id, {})
        recent.pop(key, None)
        recent[key] = message_ids
        while len(recent) > RECENT_POSTS:  # the log has the older ones by now
            del recent[next(iter(recent))]
        await self.transport.record_posted(thread_id, recent)
        digest = hashlib.blake2b(
            f"{key}\0{','.join(message_ids)}".encode(), digest_size=10
        ).hexdigest()
        await self.send(
            OutputPosted(
                thread_id=thread_id,
                action_id=f"posted-{digest}",
                at=trio.current_time(),
                key=key,
                message_ids=message_ids,
            )
        )

    async def serve_thread_opening(
        self,
        homes: Sequence[str],
        opener: ThreadOpener,
        *,
        task_status: Any = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Answer ``spindle.open.<home>`` for each of ``homes`` until cancelled (started once
        subscribed)."""
        home_of = {OPEN_SUBJECT.format(home=home): home for home in homes}

        async def open_one(subject: str, data: bytes) -> dict[str, Any]:
            asked = orjson.loads(data)
            source, title = str(asked["source"]), str(asked["title"])
            new_thread, label = await opener(source, title)
            # Before the answer: the runner seeds the new thread at once, through its root,
            # and its effects are published to this home.
            root = await self.transport.root_of(source)
            if root is not None:
                await self.transport.route(new_thread, root)
                self._roots[new_thread] = root
            await self.transport.set_home(new_thread, home_of[subject])
            return {"thread_id": new_thread, "label": label}

        await answer_requests(
            self.conn, list(home_of), "gateways", open_one, task_status=task_status
        )

    async def serve_effects(
        self,
        *,
        name: str = "gateway",
        homes: Sequence[str] | None = None,
        ack_wait_s: float = GATEWAY_ACK_WAIT_S,
        task_status: Any = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Apply effects until cancelled, acking each right after it is applied and
        reported (so a crash leaves at most the effects in hand to be delivered again).
        The threads of a fetched batch are served concurrently, each in order.
        ``homes``: only the effects of these homes' threads, each through its durable
        consumer ``gw-<home>`` (a restarted gateway of the same homes goes on where the
        dead one stopped); None: every thread's, through the consumer ``name``."""
        if homes is None:
            outboxes = [await self.transport.outbox(name, ack_wait_s=ack_wait_s)]
        else:
            outboxes = [
                await self.transport.outbox(f"gw-{home}", home=home, ack_wait_s=ack_wait_s)
                for home in homes
            ]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._report_late)
            nursery.start_soon(self._evict_idle)
            self._outboxes += outboxes
            for outbox in outboxes:
                nursery.start_soon(self._serve_outbox, outbox)
            task_status.started()

    async def _serve_outbox(self, outbox: Inbox) -> None:
        waited = await outbox.wait_for_unacked()
        if waited:
            logger.info(
                "%s: %d effects a stopped gateway had in hand, applied before newer ones",
                outbox.durable,
                waited,
            )
        async with trio.open_nursery() as keeping:
            keeping.start_soon(outbox.keep_in_hand)
            while True:
                if self._draining:
                    await trio.sleep_forever()  # until the gateway's serving is cancelled
                by_thread: dict[str, list[tuple[Msg, Effect]]] = {}
                self._fetching += 1
                try:
                    msgs = await outbox.fetch(batch=256, timeout_s=1.0)
                finally:
                    self._fetching -= 1
                for msg in msgs:
                    thread_id, effect = decode_effect(msg)
                    by_thread.setdefault(thread_id, []).append((msg, effect))
                async with trio.open_nursery() as nursery:
                    for thread_id, items in by_thread.items():
                        nursery.start_soon(self._serve_thread, outbox, thread_id, items)

    async def _serve_thread(
        self, outbox: Inbox, thread_id: str, items: list[tuple[Msg, Effect]]
    ) -> None:
        self._serving.add(thread_id)
        try:
            await self._apply_all(outbox, thread_id, items)
        finally:
            self._serving.discard(thread_id)
            self._used[thread_id] = trio.current_time()

    async def _apply_all(
        self, outbox: Inbox, thread_id: str, items: list[tuple[Msg, Effect]]
    ) -> None:
        renderer = await self.renderer(thread_id)
        # A seal whose last edit waits for the next effect (a footer may join it: the
        # renderer's ``unsettled``) is acknowledged once that edit is made: a gateway that
        # died in between leaves it to the next one, whose resumed stream makes it.
        held: tuple[Msg, str] | None = None
        for msg, effect in items:
            if isinstance(effect, KEYED_POSTS) and effect.key in self.posted_keys.get(
                thread_id, ()
            ):
                self.skipped += 1
                await outbox.ack(msg)
                continue
            try:
                posted = await renderer.apply(effect)
            except Exception as exc:  # refused for good by the platform: not retried
                self.failed += 1
                logger.warning("effect %s in %s failed: %s", effect.type, thread_id, exc)
                posted = []
            await self._report_all(thread_id, posted)
            self.applied += 1
            if self.on_applied is not None:
                self.on_applied(thread_id)
            pending = renderer.unsettled if isinstance(renderer, StreamRenderer) else None
            if held is not None and pending != held[1]:
                await outbox.ack(held[0])  # this effect made the seal's last calls
                held = None
            if pending is not None and isinstance(effect, SealOutput) and effect.key == pending:
                held = (msg, pending)
            else:
                await outbox.ack(msg)
        if held is not None and isinstance(renderer, StreamRenderer):
            try:
                await self._report_all(thread_id, await renderer.settle())
            except Exception as exc:  # refused for good: as a failed apply
                self.failed += 1
                logger.warning("seal in %s failed: %s", thread_id, exc)
            await outbox.ack(held[0])

    async def _report_all(self, thread_id: str, posted: list[tuple[str, tuple[str, ...]]]) -> None:
        late, self._late = self._late, []
        for key, message_ids in posted:
            await self.report(thread_id, key, message_ids)
        for late_thread, key, message_ids in late:
            await self.report(late_thread, key, message_ids)

"""One thread's actor: the trio task that owns the thread's one serialized action queue.

Everything that happens to a thread (chat ingress, agent events from the listener, effect
feedback from the reactor, timer ticks) is an ``Action`` sent to the actor's mailbox, and
the actor handles them one at a time. Handling one is a *commit*:

1. ``transition(state, action)`` (pure);
2. append the action to the durable log (buffered; the log flushes once per tick);
3. swap the new state into the central store;
4. hand the effects to the thread's reactor, which applies them once the action is durable
   (the effects of every action committed in one batch go over in one hand-over, in
   commit order, under the batch's last ticket: the log flushes a batch in one transaction).

So the log order is the commit order (serialized mutation), no side effect ever happens
inside a transition or before the commit, and an exception in an effect cannot reach the
state. Each ``Transition.note`` and ``LogNote`` effect is logged with thread id, run id and
action kind.

Besides the actor loop, a thread runs its reactor's lanes (each from its first effect on),
a ticker (a ``Tick`` every ``tick_interval_s`` while a run is active, for the core's
timeouts; it starts with a run and ends after it) and, once the agent is started, its
``AgentListener``; all live in the thread's own nursery so disposal leaves nothing behind.
An idle thread holds nothing more (docs/performance.md, "Memory").
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from threadspindle.runtime.core.actions import Action, AgentEventReceived, ThreadParked, Tick
from threadspindle.runtime.core.agent_events import (
    TextDelta,
    ThinkingDelta,
    continues_delta,
    joined_delta,
)
from threadspindle.runtime.core.effect_types import DismissPrompt, Effect, LogNote, StartAgent
from threadspindle.runtime.core.model import ThreadState
from threadspindle.runtime.live.inbox import Inbox
from threadspindle.runtime.live.listener import AgentListener, Backoff
from threadspindle.runtime.live.ports import (
    AdapterFactory,
    NoWorkspace,
    RendererPort,
    ThreadLog,
    ThreadOpener,
    WorkspaceFactory,
)
from threadspindle.runtime.live.reactor import Reactor
from threadspindle.runtime.live.rounds import RoundEnd
from threadspindle.runtime.live.store import Store, ThreadStatistics, TransitionFn
from threadspindle.runtime.live.timers import Timers

__all__ = ["Receipt", "ThreadActor"]

logger = logging.getLogger("spindle.actor")

BATCH = 64  # actions committed per scheduler turn at most: fair to other threads
COALESCE_MAX_CHARS = 16_384  # one merged delta's text at most (a bounded action and log row)
# A post this soon after the last one committed at once goes to the mailbox instead: one
# action of a burst is committed at once, the rest wait together and are merged.
INLINE_GAP_S = 0.002

# The one mapping of a LogNote's level to logging's (the reactor never sees a LogNote).
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


class Receipt:
    """Handed back by ``Runtime.post``: lets ingress wait until its action is committed
    and durable (e.g. before acknowledging a prompt to the user)."""

    __slots__ = ("action", "ticket", "note", "_committed", "_log")

    def __init__(self, action: Action, log: ThreadLog) -> None:
        self.action = action
        self.ticket: int | None = None  # None: not committed (yet), or a skipped no-op tick
        self.note: str | None = None
        self._committed = trio.Event()
        self._log = log

    def _commit(self, ticket: int | None, note: str | None) -> None:
        self.ticket, self.note = ticket, note
        self._committed.set()

    async def committed(self) -> None:
        await self._committed.wait()

    async def durable(self) -> bool:
        """Return once the action is in the durable log (True), or as soon as the disk
        refuses the log's writes before that (False: the action stays buffered and is
        written when the disk takes writes again; the runtime tells the thread). Ingress
        must not hang on a full disk."""
        await self._committed.wait()
        if self.ticket is None:
            return True
        return await self._log.wait_durable_or_unwritable(self.ticket)


class ThreadActor:
    # Slots: an idle thread is mostly this object and its reactor (docs/performance.md,
    # "Memory"); past 30 attributes CPython gives an instance a dict of its own (~1.5 KB).
    # A new attribute needs its name here.
    __slots__ = (
        "thread_id",
        "channel_id",
        "_store",
        "_log",
        "_transition",
        "_clock",
        "_ids",
        "tick_interval_s",
        "_timers",
        "_send",
        "_recv",
        "listener",
        "reactor",
        "committed",
        "_batch_effects",
        "_batch_ticket",
        "_committed_before_batch",
        "skipped_ticks",
        "last_activity",
        "_mailbox",
        "_busy",
        "_ticking",
        "_quiet",
        "_nursery",
        "running",
        "done",
        "closing",
        "coalesced_deltas",
        "inline_commits",
        "_parked",
        "_last_inline",
        "_committing",
    )

    def __init__(
        self,
        thread_id: str,
        *,
        store: Store,
        log: ThreadLog,
        transition: TransitionFn,
        renderer: RendererPort,
        adapter_factory: AdapterFactory,
        clock: Callable[[], float],
        ids: Callable[[], str],
        new_state: Callable[[str], ThreadState],
        tick_interval_s: float = 1.0,
        timers: Timers | None = None,
        round_end: RoundEnd | None = None,
        backoff: Backoff | None = None,
        channel_id: str | None = None,
        workspace_factory: WorkspaceFactory | None = None,
        thread_opener: ThreadOpener | None = None,
        post_elsewhere: Callable[[Action], Awaitable[object]] | None = None,
    ) -> None:
        self.thread_id = thread_id
        self.channel_id = channel_id
        self._store = store
        self._log = log
        self._transition = transition
        self._clock = clock
        self._ids = ids
        self.tick_interval_s = tick_interval_s
        self._timers = timers or Timers()  # not running: plain trio.sleep
        store.get_or_new(thread_id, new_state)
        # One object is both ends of the mailbox (``inbox.py``: a trio channel pair weighs
        # ~3 KB per idle thread).
        self._send = self._recv = Inbox[tuple[Action, Receipt | None]]()
        self.listener = AgentListener(
            thread_id,
            adapter_factory=adapter_factory,
            post=self.post_nowait,
            clock=clock,
            ids=ids,
            current_start=self._conversation_start,
            backoff=backoff,
            round_end=round_end,
        )
        self.reactor = Reactor(
            thread_id,
            renderer=renderer,
            listener=self.listener,
            log=log,
            post=self.post_nowait,
            clock=clock,
            ids=ids,
            current_run=self._current_run_id,
            workspace=(workspace_factory or NoWorkspace)(thread_id, self.post_nowait, clock, ids),
            thread_opener=thread_opener,
            post_elsewhere=post_elsewhere,
        )
        self.committed = 0
        self._batch_effects: list[Effect] = []  # visible effects of the batch being committed
        self._batch_ticket = 0
        self._committed_before_batch = 0
        self.skipped_ticks = 0
        self.last_activity = trio.current_time()
        self._mailbox = 0
        self._busy = False
        self._ticking = False  # the ticker task runs (only while a run is active)
        # Set when the mailbox empties; made only when someone waits for that (``wait_quiet``),
        # not once per action posted.
        self._quiet: trio.Event | None = None
        self._nursery: trio.Nursery | None = None
        self.running = False
        self.done = trio.Event()
        self.closing = False
        self.coalesced_deltas = 0  # deltas merged into the one before them (``_coalesce``)
        self.inline_commits = 0  # actions committed by ``post_nowait`` itself
        self._parked = False  # the actor task waits on an empty mailbox
        self._last_inline = -math.inf  # trio time of the last commit made by ``post_nowait``
        self._committing = False  # a commit (or batch of them) is under way

    # --- ingress -------------------------------------------------------------------------

    def post_nowait(self, action: Action, receipt: Receipt | None = None) -> bool:
        """Queue an action for this thread; False (and counted) when the actor is gone.

        When the actor is parked on an empty mailbox (running, nothing queued, not in the
        middle of a commit), the action is committed at once, in the caller's task: the
        commit is synchronous, so nothing can come between, and the order is the one the
        mailbox would have given. That spares a task wake-up per action (an agent's delta,
        an ``/abort``) and a scheduler round on the way to its effect. A thread that is
        behind, and the rest of a burst (``INLINE_GAP_S``), queue as before, where waiting
        deltas are merged (``_coalesce``)."""
        if self._mailbox == 0 and self._parked and not self._committing:
            now = trio.current_time()
            if now - self._last_inline < INLINE_GAP_S:
                # A burst (posted in one go): the first went in at once, the rest wait in
                # the mailbox for the actor, which merges them.
                self._parked = False
                return self._enqueue(action, receipt)
            self._last_inline = now
            self._committing = True
            try:
                self._commit(action, receipt)
                self._end_batch()
            finally:
                self._committing = False
            self.inline_commits += 1
            return True
        return self._enqueue(action, receipt)

    def _enqueue(self, action: Action, receipt: Receipt | None) -> bool:
        try:
            self._send.send_nowait((action, receipt))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            if receipt is not None:
                receipt._commit(None, "dropped: the thread's actor is closed")
            logger.info("dropped: the actor is closed", extra=self._ctx(None, action.kind))
            return False
        self._mailbox += 1
        return True

    # --- the task ------------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.running = True
                self.reactor.attach(nursery)  # its lanes start there when first needed
                task_status.started()
                while True:
                    self._parked = self._mailbox == 0
                    try:
                        action, receipt = await self._recv.receive()
                    except trio.EndOfChannel:
                        break
                    finally:
                        self._parked = False
                    self._mailbox -= 1
                    batch = [(action, receipt)]
                    # Take what is already waiting (up to a batch) before yielding: the log
                    # then flushes the batch in one transaction.
                    recv = self._recv
                    for _ in range(BATCH - 1):
                        if not len(recv):
                            # (Also once ``close`` shut the mailbox while this batch ran: the
                            # next receive then ends the loop.)
                            break
                        batch.append(recv.receive_nowait())
                        self._mailbox -= 1
                    self._committing = True
                    try:
                        for action, receipt in self._coalesce(batch):
                            self._commit(action, receipt)
                        self._end_batch()
                    finally:
                        self._committing = False
                    if self._mailbox == 0 and self._quiet is not None:
                        self._quiet.set()
                        self._quiet = None
                    # Not kept alive (with its receipt) while the actor waits for the next.
                    del batch, action, receipt
                nursery.cancel_scope.cancel()
        finally:
            self.running = False
            self.done.set()

    def _coalesce(
        self, batch: list[tuple[Action, Receipt | None]]
    ) -> list[tuple[Action, Receipt | None]]:
        """The batch with each run of consecutive text (or thinking) deltas of one agent
        stream merged into one action: one transition, one log row and one render instead
        of many. Only actions already waiting are merged, so no delta waits for another;
        the merged action is what the log records, so replay reproduces it exactly. A
        delta of another run, session or text block, anything in between, and a merge past
        ``COALESCE_MAX_CHARS`` start a new action."""
        out: list[tuple[Action, Receipt | None]] = []
        for action, receipt in batch:
            if out and receipt is None and out[-1][1] is None:
                merged = _merged_delta(out[-1][0], action)
                if merged is not None:
                    out[-1] = (merged, None)
                    self.coalesced_deltas += 1
                    continue
            out.append((action, receipt))
        return out

    def _commit(self, action: Action, receipt: Receipt | None) -> None:
        state = self._store.get(self.thread_id)
        assert state is not None
        try:
            result = self._transition(state, action)
        except Exception:  # the core promises never to raise; if it does, keep the actor
            logger.exception("transition raised", extra=self._ctx(None, action.kind))
            if receipt is not None:
                receipt._commit(None, "transition raised")
            return
        new_state: ThreadState = result.state
        effects = result.effects
        if result.note or (effects and _has_log_note(effects)):
            run_id = state.run.id if state.run else (new_state.run.id if new_state.run else None)
            self._log_notes(result.note, effects, self._ctx(run_id, action.kind))
            visible: list[Effect] = [e for e in effects if not isinstance(e, LogNote)]
        else:
            visible = list(effects)
        if isinstance(action, Tick) and not visible and new_state == state:
            # A tick that changed nothing is not worth a log row: replay is the same without.
            self.skipped_ticks += 1
            if receipt is not None:
                receipt._commit(None, result.note)
            return
        ticket = self._log.append(action, new_state)
        self._store.swap(self.thread_id, new_state)
        self.committed += 1
        if receipt is not None:
            receipt._commit(ticket, result.note)
        if visible:
            self._batch_effects.extend(visible)
            self._batch_ticket = ticket
        busy = new_state.run is not None
        if busy != self._busy:
            self._busy = busy
            if busy and not self._ticking and self._nursery is not None:
                # The ticker lives only while runs are active: an idle thread has none.
                self._ticking = True
                self._nursery.start_soon(self._ticker)

    def _end_batch(self) -> None:
        """Hand the batch's effects to the reactor in one go, in commit order, under the
        ticket of the last action that had any: the log flushes the whole batch in one
        transaction, so they would all become applicable at the same moment anyway."""
        if self._batch_effects:
            effects, self._batch_effects = self._batch_effects, []
            self.reactor.submit(self._batch_ticket, tuple(effects))
        if self.committed != self._committed_before_batch:  # a skipped tick is no activity
            self._committed_before_batch = self.committed
            self.last_activity = trio.current_time()

    @staticmethod
    def _log_notes(note: str | None, effects: tuple[Effect, ...], context: dict[str, str]) -> None:
        if note:
            logger.info("%s", note, extra=context)
        for effect in effects:
            if isinstance(effect, LogNote):
                logger.log(_LEVELS[effect.level], "%s", effect.message, extra=context)

    def _ctx(self, run_id: str | None, action_kind: str) -> dict[str, str]:
        """The structured fields every runtime log record carries (``thread_id``, ``run``,
        ``action``; ``thread`` is taken: LogRecord keeps the OS thread id there)."""
        return {"thread_id": self.thread_id, "run": run_id or "", "action": action_kind}

    async def _ticker(self) -> None:
        """Post a Tick every ``tick_interval_s`` while a run is active, then end (``_commit``
        starts it again with the next run)."""
        try:
            while self._busy:
                await self._timers.sleep(self.tick_interval_s)
                if self._busy:
                    self.post_nowait(
                        Tick(thread_id=self.thread_id, action_id=self._ids(), at=self._clock())
                    )
        finally:
            self._ticking = False

    def _current_run_id(self) -> str | None:
        state = self._store.get(self.thread_id)
        return state.run.id if state is not None and state.run is not None else None

    def _conversation_start(self) -> StartAgent | None:
        """How to (re)start the agent now: the conversation's latest session, or None."""
        state = self._store.get(self.thread_id)
        conv = state.conversation if state else None
        if conv is None:
            return None
        return StartAgent.of(conv)

    # --- quiescence and disposal ----------------------------------------------------------

    def is_quiet(self) -> bool:
        return self._mailbox == 0 and self.reactor.pending == 0

    async def wait_quiet(self) -> None:
        """Wait until the mailbox is empty and every committed effect has been applied."""
        while not self.is_quiet():
            if self._mailbox:
                if self._quiet is None:
                    self._quiet = trio.Event()
                await self._quiet.wait()
            else:
                await self.reactor.wait_idle()
            await trio.lowlevel.checkpoint()

    def is_idle(self) -> bool:
        """Nothing going on: no run, no queued prompt, no pending question, nothing queued."""
        state = self._store.get(self.thread_id)
        return (
            self.is_quiet()
            and state is not None
            and state.run is None
            and not state.queue
            and not state.blockers
        )

    async def close(self, reason: str, *, drain_timeout_s: float = 10.0) -> None:
        """Park the thread (the core stops the run with a notice, closes its prompts, keeps
        the queue and asks for StopAgent), stop any agent still running, drain what that
        caused, then cancel every task of the thread. Bounded by ``drain_timeout_s``."""
        self.closing = True
        with trio.move_on_after(drain_timeout_s):
            # First let the core park the thread: it stops the run with a notice the chat
            # can still show and keeps the queue, so the agent's exit below is no crash and
            # does not dispatch the next prompt into an agent that is going away.
            self.post_nowait(
                ThreadParked(
                    thread_id=self.thread_id, action_id=self._ids(), at=self._clock(), reason=reason
                )
            )
            await self.wait_quiet()
            await self.listener.stop(reason, report=True)
            await self.wait_quiet()
        with trio.move_on_after(drain_timeout_s / 2):
            await self._dismiss_leftover_prompts(reason)
            await self._flush_renderer()
            await self.wait_quiet()  # commit the OutputPosted of that last flush
        self._parked = False  # from here on nothing is committed: posts are dropped
        self._send.close()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
        await self.done.wait()

    async def _dismiss_leftover_prompts(self, reason: str) -> None:
        """Prompts the core left open (it had no agent exit to react to): close them in the
        chat so no button stays clickable for an actor that is gone."""
        state = self._store.get(self.thread_id)
        if state is None:
            return
        for blocker in state.blockers:
            try:
                posted = await self.reactor.renderer.apply(
                    DismissPrompt(key=blocker.key, request_id=blocker.request_id, outcome=reason)
                )
                for key, message_ids in posted:
                    self.reactor.report_posted(key, message_ids)
            except Exception as exc:
                logger.warning(
                    "could not dismiss %s: %s",
                    blocker.key,
                    exc,
                    extra=self._ctx(blocker.run_id, "dispose"),
                )

    async def _flush_renderer(self) -> None:
        """The renderer's last paced sends and edits, while the actor can still log what
        they posted (and what an earlier failed call left unreported)."""
        try:
            posted = await self.reactor.renderer.aclose()
        except Exception as exc:
            logger.warning("last renderer flush failed: %s", exc, extra=self._ctx(None, "dispose"))
            return
        for key, message_ids in posted:
            self.reactor.report_posted(key, message_ids)

    def statistics(self) -> ThreadStatistics:
        base = self._store.statistics(self.thread_id, self._log.last_seq(self.thread_id))
        assert base is not None
        return base.model_copy(
            update={
                "mailbox_length": self._mailbox,
                "pending_effects": self.reactor.pending,
                "actor_running": self.running,
                "listener_running": self.listener.running,
                "listener_starts": self.listener.starts,
                # merged in the mailbox, and by the listener as they were read
                "coalesced_deltas": self.coalesced_deltas + self.listener.merged_deltas,
            }
        )


def _has_log_note(effects: tuple[Effect, ...]) -> bool:
    # A loop, not ``any`` over a generator: this runs for every action committed.
    for effect in effects:
        if type(effect) is LogNote:
            return True
    return False


def _merged_delta(first: Action, second: Action) -> AgentEventReceived | None:
    """``first`` and ``second`` as one delta action, when both are deltas of one kind from
    one stream (run, session, text block) and the merged text stays within the bound."""
    if not (isinstance(first, AgentEventReceived) and isinstance(second, AgentEventReceived)):
        return None
    a, b = first.event, second.event
    if not (
        isinstance(a, (TextDelta, ThinkingDelta))
        and isinstance(b, (TextDelta, ThinkingDelta))
        and continues_delta(a, b)
    ):
        return None
    if first.run_id != second.run_id or first.session_id != second.session_id:
        return None
    if len(a.text) + len(b.text) > COALESCE_MAX_CHARS:
        return None
    return first.replace(event=joined_delta(a, [a.text, b.text]))

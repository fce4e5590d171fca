"""The registry of live thread actors: ``Runtime``, the one entry point for ingress.

``Runtime.post(action)`` creates the thread's actor on first use and queues the action; the
returned ``Receipt`` lets ingress wait until it is durable. The runtime owns the event log's
flusher, the idle sweeper and every actor task, inside one nursery (``open_runtime``).

Invariants:

- At most one actor per thread at any time: while a thread's actor is being disposed, new
  actions for it wait and then go to a fresh actor (its state comes from the store).
- Start-up rebuilds the store from the log (snapshot + tail) before anything is posted,
  then posts ``RuntimeRecovered`` to every thread that had a run, queued prompts or open
  questions: the core reports the run as interrupted and the queue goes on. A log that
  cannot be read (``LogCorrupt``: a bad row, a missing seq) stops start-up with that error
  before any task exists, so nothing is left waiting and nothing is written.
- While the disk refuses the log's writes (``EventLog.unwritable``: full, read-only), every
  thread with an actor is told so, actions from people are refused with a reply (nothing
  enters the log that it could not keep), ``/status`` is still answered (it reads the
  state without committing anything), and what the runtime itself records stays buffered
  until the disk takes writes again; then every thread is told that prompts are accepted
  again. No restart is needed.
- Disposal (``dispose``, ``dispose_for_directory``, ``dispose_all``, the idle sweeper)
  stops the agent process tree, lets the core close its prompts, and leaves no task,
  timer or process of the thread behind.
- Every dependency is injected: renderer and adapter factories, the log, the clock, the
  id source, the policy, even the transition function (replay tests use the real one).
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import tzinfo
from typing import Any

import trio

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.actions import Action, PolicySet, RuntimeRecovered
from threadspindle.runtime.core.effect_types import Effect, PostOutput, ReplyToCommand
from threadspindle.runtime.core.model import Policy, ThreadState
from threadspindle.runtime.core.storable import storable
from threadspindle.runtime.live.actor import Receipt, ThreadActor
from threadspindle.runtime.live.listener import Backoff
from threadspindle.runtime.live.log import LogUnwritable
from threadspindle.runtime.live.ports import (
    AdapterFactory,
    RendererFactory,
    RendererPort,
    ThreadLog,
    ThreadOpener,
    WorkspaceFactory,
)
from threadspindle.runtime.live.rounds import RoundEnd
from threadspindle.runtime.live.schedules import ScheduleTimer, local_timezone
from threadspindle.runtime.live.store import (
    Store,
    ThreadStatistics,
    TransitionFn,
    rebuild_from_log,
)
from threadspindle.runtime.live.timers import Timers

__all__ = ["Runtime", "RuntimeClosed", "open_runtime", "sequential_ids"]

logger = logging.getLogger("spindle.runtime")


class RuntimeClosed(RuntimeError):
    """The runtime is shutting down and takes no more actions."""


# Actions the runtime makes itself: they still go into the (buffered) log while the disk
# refuses writes. Every other action comes from a person and is refused then.
_MADE_BY_THE_RUNTIME = (
    A.AgentEventReceived,
    A.OutputPosted,
    A.EffectFailed,
    A.AgentConnected,
    A.AgentExited,
    A.Tick,
    A.RuntimeRecovered,
    A.ThreadParked,
    A.PolicySet,
    A.CheckpointTaken,
    A.WorkspaceJobFinished,
    A.ConversationRolledBack,
    A.ShellOutput,
    A.ShellFinished,
    A.ScheduleDue,
)


def unwritable_notice(error: LogUnwritable) -> str:
    return (
        f"⚠ Spindle cannot save anything right now: {error.reason} ({error.path}). Until it "
        "can, new prompts and commands are refused and the agent's output waits; what was "
        "sent just before this is held and saved then. Nothing already accepted is lost. "
        "/status still answers."
    )


WRITABLE_AGAIN_NOTICE = "✅ Spindle can save again: prompts and commands are accepted again."


def sequential_ids(prefix: str = "rt") -> Callable[[], str]:
    """Ids for actions the runtime makes itself (feedback, ticks): unique per process and,
    with the start time in them, across restarts."""
    counter = itertools.count(1)
    boot = f"{int(time.time() * 1000):x}"
    return lambda: f"{prefix}-{boot}-{next(counter)}"


class Runtime:
    def __init__(
        self,
        *,
        log: ThreadLog,
        renderer_factory: RendererFactory,
        adapter_factory: AdapterFactory,
        clock: Callable[[], float] = time.time,
        ids: Callable[[], str] | None = None,
        policy: Policy | None = None,
        transition: TransitionFn | None = None,
        tick_interval_s: float = 1.0,
        idle_timeout_s: float | None = None,
        sweep_interval_s: float = 60.0,
        backoff: Callable[[], Backoff] = Backoff,
        enrich: Callable[[Action], Action] | None = None,
        on_dispose: Callable[[str], Awaitable[object]] | None = None,
        workspace_factory: WorkspaceFactory | None = None,
        schedule_interval_s: float = 1.0,
        timezone: tzinfo | None = None,
        on_start: Callable[[Runtime], object] | None = None,
        channel_policies: Mapping[str, Policy] | None = None,
        thread_opener: ThreadOpener | None = None,
        post_elsewhere: Callable[[Action], Awaitable[object]] | None = None,
    ) -> None:
        if transition is None:
            from threadspindle.runtime.core.transitions import transition as core_transition

            transition = core_transition
        self.log = log
        self.store = Store()
        self.policy = policy
        self._renderer_factory = renderer_factory
        self._adapter_factory = adapter_factory
        self.thread_opener = thread_opener  # the platform's, for /fork and /btw
        # Where a thread's action for another thread goes (the seed of a fork): this
        # runtime, unless that thread may be another node's (a cluster runner sends it to
        # the owner of its root).
        self.post_elsewhere = post_elsewhere
        self._clock = clock
        self._ids = ids or sequential_ids()
        self._transition = transition
        self.tick_interval_s = tick_interval_s
        self.timers = Timers()  # every thread's ticker sleeps on it (runtime/live/timers.py)
        # Merges an agent's deltas read together (rounds.py), and flushes what they became.
        self.round_end = RoundEnd(after_calls=log.flush_now)
        self.idle_timeout_s = idle_timeout_s
        self.sweep_interval_s = sweep_interval_s
        self._backoff = backoff
        # Ingress-side additions to an action before it is queued (and logged), e.g. the
        # process manager's view of a thread for /status: I/O the core must not do.
        self._enrich = enrich
        # Run after a thread is disposed while the runtime keeps running (not at shutdown),
        # e.g. to stop the processes the thread's agent started.
        self._on_dispose = on_dispose
        # Applies a thread's workspace effects (checkpoints, git jobs, shell commands);
        # without one they are answered as unavailable (``ports.NoWorkspace``).
        self._workspace_factory = workspace_factory
        self._actors: dict[str, ThreadActor] = {}
        # Told the runtime once it runs (e.g. the MCP server's wake-up tool gets ``post``).
        self._on_start = on_start
        # A chat channel's own policy (its default verbosity) for the threads in it.
        self._channel_policies = dict(channel_policies or {})
        # Scheduled prompts: one timer for every thread (runtime/live/schedules.py).
        self.timezone = timezone or local_timezone()
        self.schedule_timer = ScheduleTimer(
            self.snapshots,
            self._post_timer_action,
            clock=clock,
            ids=self._ids,
            tz=self.timezone,
            interval_s=schedule_interval_s,
        )
        self._disposing: dict[str, trio.Event] = {}
        self._channels: dict[str, str] = {}
        self._nursery: trio.Nursery | None = None
        self.closed = False
        self.recovered: list[str] = []  # threads sent RuntimeRecovered at start-up
        self.startup_folded = 0
        self.startup_s = 0.0
        self.disposed = 0
        self.refused_unwritable = 0  # actions from people refused while the disk refused
        self._unsubscribe: Callable[[], None] | None = None

    # --- start-up ------------------------------------------------------------------------

    def _rebuild(self) -> None:
        """Fold the log into the store, checking every row start-up needs (``LogCorrupt``
        otherwise): the tail after each snapshot and every ``output_posted`` row."""
        t0 = time.perf_counter()
        self.store, self.startup_folded = rebuild_from_log(self.log, self._transition)
        self.log.check_posted_outputs()
        self.startup_s = time.perf_counter() - t0
        logger.info(
            "rebuilt %d thread(s) from %s: folded %d action(s) in %.3f s",
            len(self.store.thread_ids()),
            self.log.path,
            self.startup_folded,
            self.startup_s,
        )

    async def _start(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._unsubscribe = self.log.on_writability(self._writability_changed)
        await nursery.start(self.log.run_flusher)
        await nursery.start(self.timers.run)
        await nursery.start(self.round_end.run)
        if self.idle_timeout_s is not None:
            nursery.start_soon(self._sweep_idle)
        # After RuntimeRecovered below: a schedule that came due while Spindle was down
        # fires once, at the timer's first scan (the policy in runtime/live/schedules.py).
        nursery.start_soon(self._run_schedule_timer)
        for thread_id, state in self.store.snapshot().items():
            ws = state.workspace  # a workspace job or shell command died with the process
            if state.run is not None or state.queue or state.blockers or ws.job or ws.shell:
                self.recovered.append(thread_id)
                self._post_nowait(
                    RuntimeRecovered(thread_id=thread_id, action_id=self._ids(), at=self._clock())
                )

    def adopt(self, thread_id: str) -> bool:
        """Fold one thread's log into the store after start-up: for a log that gained the
        thread since (a runner that claimed it from another: ``effects.jetstream``). Like
        start-up, a thread left with a run, queued prompts or open questions is sent
        ``RuntimeRecovered``. False (nothing done) while the thread has an actor."""
        if thread_id in self._actors or self._nursery is None:
            return False
        seq, state = self.log.snapshots().get(thread_id, (0, ThreadState.new(thread_id)))
        for entry in self.log.read(thread_id, after_seq=seq):
            state = self._transition(state, entry.action).state
        self.store.swap(thread_id, state)
        if state.run is not None or state.queue or state.blockers:
            self.recovered.append(thread_id)
            self._post_nowait(
                RuntimeRecovered(thread_id=thread_id, action_id=self._ids(), at=self._clock())
            )
        return True

    # --- ingress -------------------------------------------------------------------------

    async def post(self, action: Action, *, channel_id: str | None = None) -> Receipt:
        """Queue ``action`` on its thread's actor (created if needed). ``channel_id``
        records which chat channel the thread belongs to (for channel-scoped disposal)."""
        if self.closed:
            raise RuntimeClosed("the runtime is shutting down")
        while action.thread_id in self._disposing:
            await self._disposing[action.thread_id].wait()
        if channel_id is not None:
            self._channels[action.thread_id] = channel_id
        if self._enrich is not None:
            action = self._enrich(action)
        action = storable(action)  # a lone surrogate would make it unloggable
        unwritable = self.log.unwritable
        if unwritable is not None and not isinstance(action, _MADE_BY_THE_RUNTIME):
            return self._answer_unwritable(action, unwritable)
        return self._post_nowait(action)

    def _answer_unwritable(self, action: Action, error: LogUnwritable) -> Receipt:
        """While the disk refuses writes: answer ``/status`` from the state as it is (the
        core's own reply, nothing committed), refuse anything else with a reply. Either way
        the answer goes straight to the thread's renderer: there is nothing to log."""
        actor = self.get_or_create(action.thread_id)
        receipt = Receipt(action, self.log)
        notice = unwritable_notice(error)
        replies: list[Effect] = []
        if isinstance(action, A.StatusRequested):
            state = self.store.get(action.thread_id) or ThreadState.new(action.thread_id)
            result = self._transition(state, action)  # pure: the result is shown, not kept
            replies = [
                effect.replace(text=f"{effect.text}\n{notice}")
                for effect in result.effects
                if isinstance(effect, ReplyToCommand)
            ]
            receipt._commit(None, "answered without committing: the log cannot be written")
        else:
            self.refused_unwritable += 1
            replies = [
                ReplyToCommand(
                    key=f"{action.thread_id}/refused/{action.action_id}",
                    action_id=action.action_id,
                    text=f"Not accepted. {notice}",
                    ephemeral=True,
                )
            ]
            receipt._commit(None, f"refused: {error}")
            logger.warning(
                "refused while the log cannot be written: %s",
                error.reason,
                extra={"thread_id": action.thread_id, "run": "", "action": action.kind},
            )
        assert self._nursery is not None
        for effect in replies:
            self._nursery.start_soon(self._show, actor, effect)
        return receipt

    def _writability_changed(self, error: LogUnwritable | None) -> None:
        """The log's disk started or stopped refusing writes: tell every live thread."""
        if self.closed or self._nursery is None:
            return
        if error is not None:
            logger.warning(
                "%s: actions from people are refused until it can be written again; "
                "%d action(s) wait to be written",
                error,
                self.log.statistics().pending,
            )
            text = unwritable_notice(error)
        else:
            logger.warning("the event log %s can be written again", self.log.path)
            text = WRITABLE_AGAIN_NOTICE
        for thread_id, actor in list(self._actors.items()):
            notice = PostOutput(key=f"{thread_id}/storage-{self._ids()}", kind="notice", text=text)
            self._nursery.start_soon(self._show, actor, notice)

    async def _show(self, actor: ThreadActor, effect: Effect) -> None:
        """Show a runtime notice or reply in the thread, outside the log (what the renderer
        reports as posted by this call, and by earlier ones, is reported as usual)."""
        try:
            for key, message_ids in await actor.reactor.renderer.apply(effect):
                actor.reactor.report_posted(key, message_ids)
        except Exception as exc:  # a chat outage must not take the runtime down
            logger.warning(
                "could not show %s: %s",
                effect.type,
                exc,
                extra={"thread_id": actor.thread_id, "run": "", "action": "notice"},
            )

    async def _run_schedule_timer(self) -> None:
        await trio.lowlevel.checkpoint()  # the recovery actions of _start go first
        await self.schedule_timer.run()

    def _post_timer_action(self, action: Action) -> bool:
        if self.closed or action.thread_id in self._disposing:
            return False  # the state keeps the schedule: a later scan posts it
        self._post_nowait(action)
        return True

    def _post_nowait(self, action: Action) -> Receipt:
        actor = self.get_or_create(action.thread_id)
        receipt = Receipt(action, self.log)
        actor.post_nowait(action, receipt)
        return receipt

    def get(self, thread_id: str) -> ThreadActor | None:
        return self._actors.get(thread_id)

    def get_or_create(self, thread_id: str, *, channel_id: str | None = None) -> ThreadActor:
        if self._nursery is None:
            raise RuntimeError("use the runtime inside `async with open_runtime(...)`")
        if channel_id is not None:
            self._channels[thread_id] = channel_id
        actor = self._actors.get(thread_id)
        if actor is not None:
            return actor
        if thread_id in self._disposing:
            raise RuntimeError(f"thread {thread_id} is being disposed; await post() instead")
        actor = ThreadActor(
            thread_id,
            store=self.store,
            log=self.log,
            transition=self._transition,
            renderer=self._renderer_for(thread_id),
            adapter_factory=self._adapter_factory,
            clock=self._clock,
            ids=self._ids,
            # Every thread starts from the default state; the configured policy goes in by
            # a logged PolicySet, so a replay from the log alone sees the same policy.
            new_state=ThreadState.new,
            tick_interval_s=self.tick_interval_s,
            timers=self.timers,
            round_end=self.round_end,
            backoff=self._backoff(),
            channel_id=self._channels.get(thread_id),
            workspace_factory=self._workspace_factory,
            thread_opener=self._open_thread,
            post_elsewhere=self._post_elsewhere,
        )
        self._actors[thread_id] = actor
        self._nursery.start_soon(self._run_actor, actor)
        state = self.store.get(thread_id)
        channel = self._channels.get(thread_id)
        policy = self._channel_policies.get(channel or "", self.policy)
        if channel is None and policy is not None and state is not None:
            # Woken without its channel (a schedule after a restart): keep the verbosity
            # its channel gave it.
            policy = policy.replace(verbosity=state.policy.verbosity)
        if policy is not None and state is not None and state.policy != policy:
            # The configured policy goes through the log like everything else.
            actor.post_nowait(
                PolicySet(
                    thread_id=thread_id, action_id=self._ids(), at=self._clock(), policy=policy
                )
            )
        return actor

    async def _open_thread(self, source_thread_id: str, title: str) -> tuple[str, str]:
        """The platform's ``thread_opener``, looked up when used: the app may set it after
        the runtime is open (the console's chat is made with the runtime)."""
        if self.thread_opener is None:
            raise RuntimeError("this chat platform cannot open threads")
        return await self.thread_opener(source_thread_id, title)

    async def _post_elsewhere(self, action: Action) -> object:
        """An action one thread makes for another (``post_elsewhere``, else ``post``)."""
        if self.post_elsewhere is not None:
            return await self.post_elsewhere(action)
        return await self.post(action)

    def _renderer_for(self, thread_id: str) -> RendererPort:
        """A renderer for the thread, told what the log says was already posted, so it
        never posts a key twice and can still edit or dismiss what an earlier process
        posted."""
        renderer = self._renderer_factory(thread_id)
        for key, message_ids in self.log.posted_outputs(thread_id).items():
            renderer.known(key, message_ids)
        return renderer

    async def _run_actor(self, actor: ThreadActor) -> None:
        try:
            await actor.run()
        finally:
            if self._actors.get(actor.thread_id) is actor:
                del self._actors[actor.thread_id]

    # --- views ---------------------------------------------------------------------------

    def snapshot(self, thread_id: str) -> ThreadState | None:
        return self.store.get(thread_id)

    def snapshots(self) -> Mapping[str, ThreadState]:
        return self.store.snapshot()

    def statistics(self, thread_id: str) -> ThreadStatistics | None:
        actor = self._actors.get(thread_id)
        if actor is not None:
            return actor.statistics()
        return self.store.statistics(thread_id, self.log.last_seq(thread_id))

    def actors(self) -> list[str]:
        return list(self._actors)

    async def wait_quiet(self, thread_id: str | None = None) -> None:
        """Wait until the thread (or every thread) has no action or effect in flight. An
        agent may still send events later: this is a moment of quiet, not an end."""
        while True:
            if thread_id is not None:
                actors = [self._actors[thread_id]] if thread_id in self._actors else []
            else:
                actors = list(self._actors.values())
            waited = False
            for actor in actors:  # one pass: O(threads), not O(threads^2)
                if not actor.is_quiet():
                    await actor.wait_quiet()
                    waited = True
            if not waited:
                return

    # --- disposal ------------------------------------------------------------------------

    async def dispose(self, thread_id: str, reason: str = "thread disposed") -> bool:
        """Stop the thread's actor, agent and timers; False if it had none."""
        actor = self._actors.get(thread_id)
        if actor is None:
            return False
        done = self._disposing.setdefault(thread_id, trio.Event())
        # While the disk refuses writes the thread's effects cannot be applied (they wait
        # for durability): waiting long for them to drain would only delay the stop.
        drain_s = 1.0 if self.log.unwritable is not None else 10.0
        try:
            await actor.close(reason, drain_timeout_s=drain_s)
        finally:
            self._actors.pop(thread_id, None)
            self._disposing.pop(thread_id, None)
            done.set()
            self.disposed += 1
        logger.info(
            "disposed: %s", reason, extra={"thread_id": thread_id, "run": "", "action": "dispose"}
        )
        if self._on_dispose is not None and not self.closed:
            try:
                await self._on_dispose(thread_id)
            except Exception:
                logger.exception(
                    "after disposal", extra={"thread_id": thread_id, "run": "", "action": "dispose"}
                )
        return True

    async def dispose_for_directory(self, directory: str, channel: str | None = None) -> list[str]:
        """Dispose every thread whose conversation works in ``directory`` (or below it),
        only those of ``channel`` when given. Returns the disposed thread ids."""
        root = os.path.realpath(directory)
        chosen = []
        for thread_id in list(self._actors):
            state = self.store.get(thread_id)
            conv = state.conversation if state else None
            if conv is None:
                continue
            workdir = os.path.realpath(conv.workdir)
            if workdir != root and not workdir.startswith(root.rstrip("/") + "/"):
                continue
            if channel is not None and self._channels.get(thread_id) != channel:
                continue
            chosen.append(thread_id)
        async with trio.open_nursery() as nursery:
            for thread_id in chosen:
                nursery.start_soon(self.dispose, thread_id, f"directory {directory} released")
        return chosen

    async def dispose_all(self, reason: str = "shutting down") -> None:
        async with trio.open_nursery() as nursery:
            for thread_id in list(self._actors):
                nursery.start_soon(self.dispose, thread_id, reason)

    async def _sweep_idle(self) -> None:
        assert self.idle_timeout_s is not None
        while True:
            await trio.sleep(self.sweep_interval_s)
            now = trio.current_time()
            for thread_id, actor in list(self._actors.items()):
                if actor.is_idle() and now - actor.last_activity >= self.idle_timeout_s:
                    await self.dispose(thread_id, "idle")


@asynccontextmanager
async def open_runtime(**kwargs: Any) -> AsyncIterator[Runtime]:
    """Run a ``Runtime`` (arguments as for ``Runtime``) for the body of the block; on the
    way out every thread is disposed and the log flushed."""
    runtime = Runtime(**kwargs)
    # A log that cannot be read fails here, before any task exists (raised as it is).
    runtime._rebuild()
    async with trio.open_nursery() as outer:
        # The runtime's own tasks (actors, reactors, listeners, the log flusher) live in a
        # shielded nursery: when the code using the runtime is cancelled (Ctrl-C, a failing
        # sibling task), they keep working long enough to park every thread (its run stopped
        # with a notice, its queue kept) and flush the log; only then are they cancelled.
        service, scope = await outer.start(_shielded_nursery)
        try:
            await runtime._start(service)
        except BaseException:
            scope.cancel()  # else the shielded nursery would wait forever
            raise
        if runtime._on_start is not None:
            runtime._on_start(runtime)
        try:
            yield runtime
        finally:
            runtime.closed = True
            if runtime._unsubscribe is not None:
                runtime._unsubscribe()
            with trio.CancelScope(shield=True):
                with trio.move_on_after(30):
                    await runtime.dispose_all()
                try:
                    runtime.log.flush()
                except LogUnwritable:
                    pass  # still buffered: the log's owner learns it from ``close``
            scope.cancel()


async def _shielded_nursery(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    with trio.CancelScope(shield=True) as scope:
        async with trio.open_nursery() as nursery:
            task_status.started((nursery, scope))
            await trio.sleep_forever()

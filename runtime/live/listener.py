"""The thread's one long-lived agent listener.

``AgentListener`` owns the thread's agent connection: it runs ``adapter.serve`` in a task,
turns every ``StampedEvent`` into an ``AgentEventReceived`` action posted to the thread's
queue, posts ``AgentConnected`` each time an agent gets ready and ``AgentExited`` when one
that got ready ends by itself (or is stopped by disposal; a stop the core asked for is not
reported back, see ``stop``). A start that fails is reported by the caller of ``ensure``.
Invariants:

- It outlives runs: interrupting or aborting a turn goes to the adapter in-band and never
  stops the listener (listener continuity). Only ``stop`` (a ``StopAgent`` effect, or
  disposal) ends it.
- When the agent dies by itself and the thread still has a conversation, it starts the agent
  again (resuming the conversation's latest session id) after a bounded exponential backoff:
  0.5 s doubling to 30 s, and never more than ``max_starts`` starts per ``window_s``.
- It never decides anything about runs: it reports, the pure core decides.

Every thread has its own adapter; an adapter of a server shared by many threads (``opencode
serve``) routes that server's events to its own session itself (``agents/base/
session_router.py``), so the runtime has no demultiplexer.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from threadspindle.runtime.core.actions import (
    Action,
    AgentConnected,
    AgentEventReceived,
    AgentExited,
)
from threadspindle.runtime.core.agent_events import (
    MAX_EVENT_CHARS,
    AgentError,
    PermissionRequested,
    QuestionAsked,
    SessionStarted,
    SteerRefused,
    SteerTaken,
    TextDelta,
    ThinkingDelta,
    TitleChanged,
    TurnAborted,
    TurnCompleted,
    bounded_event,
    continues_delta,
    joined_delta,
    split_delta,
)
from threadspindle.runtime.core.effect_types import StartAgent
from threadspindle.runtime.live.ports import AdapterFactory, AgentPort, StampedEvent
from threadspindle.runtime.live.rounds import RoundEnd

__all__ = ["AgentListener", "AgentUnavailable", "Backoff", "StartCancelled"]

logger = logging.getLogger("spindle.listener")

# The deltas that merge, as a tuple: ``isinstance(e, TextDelta | ThinkingDelta)`` builds the
# union anew at every call, and this runs for every delta an agent says.
_DELTAS = (TextDelta, ThinkingDelta)
EMIT_BURST_S = 0.001  # agent events closer together than this are a burst (``_emit``)
MERGE_MAX_CHARS = 16_384  # one merged delta's text at most (a bounded action and log row)
# What one run's agent may say, in characters (text and thinking, tool calls counted by their
# JSON): the log keeps every event, so an agent that floods (a loop printing, a hostile one)
# would fill the disk for every thread, 50 MB a second. Past it the run's further events
# are dropped but for those that end the turn or wait for the user, and one notice says so.
RUN_OUTPUT_LIMIT_CHARS = 2_000_000
# Taken past the limit: the turn's end, the session, what the user must answer, steers.
_KEPT_PAST_LIMIT = (
    TurnCompleted,
    TurnAborted,
    SessionStarted,
    PermissionRequested,
    QuestionAsked,
    SteerTaken,
    SteerRefused,
    TitleChanged,
)


class _Merging:
    """Deltas of one stream read in one scheduler round after the round's first event,
    waiting for the round's end to become one action (``AgentListener._emit``)."""

    __slots__ = ("run_id", "session_id", "first", "texts", "chars", "at")

    def __init__(self, stamped: StampedEvent, first: TextDelta | ThinkingDelta, at: float) -> None:
        self.run_id = stamped.run_id
        self.session_id = stamped.session_id
        self.first = first
        self.texts = [first.text]
        self.chars = len(first.text)
        self.at = at


# The ``_done`` of every listener whose task never ran: already set, shared (an event that
# is set stays set; a starting listener gets a fresh one).
_DONE = trio.Event()
_DONE.set()


class AgentUnavailable(RuntimeError):
    """The agent is not running and is not about to be (backing off, stopped, failed)."""


class StartCancelled(AgentUnavailable):
    """A stop came after the start was asked for (the core restarted the agent: a new
    workdir, conversation or model; or the thread is being disposed): that start is void,
    not failed, and the start asked for after the stop is the one that counts."""


@dataclass
class Backoff:
    """Bounded exponential backoff between agent restarts, with a starts-per-window cap."""

    initial_s: float = 0.5
    factor: float = 2.0
    max_s: float = 30.0
    max_starts: int = 5  # at most this many starts ...
    window_s: float = 60.0  # ... in any window this long
    healthy_after_s: float = 60.0  # an agent up this long resets the delay
    _next: float = field(default=0.0, init=False)
    # A list, not a deque: it holds max_starts floats at most, and an empty deque takes
    # ~600 bytes in every idle thread.
    _starts: list[float] = field(default_factory=list, init=False)

    def record_start(self, now: float) -> None:
        self._starts.append(now)
        if len(self._starts) > self.max_starts:
            del self._starts[: len(self._starts) - self.max_starts]

    def delay(self, now: float, uptime_s: float) -> float:
        """Seconds to wait before the next start, given how long the last one lived."""
        if uptime_s >= self.healthy_after_s or self._next == 0.0:
            self._next = self.initial_s
        else:
            self._next = min(self._next * self.factor, self.max_s)
        wait = self._next
        if len(self._starts) >= self.max_starts:
            # The window cap: the oldest of the last max_starts starts must leave the window.
            wait = max(wait, self._starts[0] + self.window_s - now)
        return wait


class AgentListener:
    """The long-lived task that runs one thread's agent adapter and reports its events."""

    # Slots, as ``ThreadActor``'s: past 30 attributes CPython gives every instance a dict of
    # its own (~1.5 KB an idle thread). A new attribute needs its name here.
    __slots__ = (
        "thread_id",
        "_round_end",
        "_merging",
        "_in_round",
        "_round_events",
        "_reads_hold_more",
        "merged_deltas",
        "_output_run",
        "_output_chars",
        "dropped_events",
        "_factory",
        "_post",
        "_last_emit",
        "_clock",
        "_ids",
        "_current_start",
        "backoff",
        "start_timeout_s",
        "adapter",
        "starts",
        "stops",
        "exits",
        "running",
        "backing_off",
        "_stopping",
        "_report_stop",
        "_changed",
        "_done",
        "_last_error",
        "_waiters",
        "_start_scope",
        "_restart_at",
        "_backoff_start",
        "wait_for_restart_s",
    )

    def __init__(
        self,
        thread_id: str,
        *,
        adapter_factory: AdapterFactory,
        post: Callable[[Action], object],
        clock: Callable[[], float],
        ids: Callable[[], str],
        current_start: Callable[[], StartAgent | None],
        backoff: Backoff | None = None,
        start_timeout_s: float = 60.0,
        wait_for_restart_s: float = 5.0,
        round_end: RoundEnd | None = None,
    ) -> None:
        self.thread_id = thread_id
        self._round_end = round_end
        self._merging: _Merging | None = None
        self._in_round = False  # an event came this scheduler round (``_emit``)
        self._round_events = 0  # events that came this round
        self._reads_hold_more = False  # the last round that had events had more than one
        self.merged_deltas = 0  # deltas that went into the action of the one before them
        self._output_run: str | None = None  # the run ``_output_chars`` counts for
        self._output_chars = 0
        self.dropped_events = 0  # past RUN_OUTPUT_LIMIT_CHARS
        self._factory = adapter_factory
        self._post = post
        self._last_emit = -math.inf  # trio time of the last event emitted
        self._clock = clock
        self._ids = ids
        self._current_start = current_start
        self.backoff = backoff or Backoff()
        self.start_timeout_s = start_timeout_s
        self.adapter: AgentPort | None = None  # set while the agent is ready for prompts
        self.starts = 0  # serve() calls in this process (listener starts)
        self.stops = 0  # stops asked for (StopAgent, disposal): a start asked before one is void
        self.exits = 0
        self.running = False  # the listener task is alive (starting, serving or backing off)
        self.backing_off = False
        self._stopping = False
        self._report_stop = False
        # Made when someone waits for a change (``_changed_event``), not in every thread.
        self._changed: trio.Event | None = None
        self._done = _DONE  # replaced by a fresh event when the listener task starts
        self._last_error = ""
        self._waiters = 0  # ensure() calls waiting for the agent
        self._start_scope: trio.CancelScope | None = None
        self._restart_at = 0.0
        # The start a backoff waits to retry; None once another start is asked for (the
        # conversation changed: the last failure says nothing of it), which ends the wait.
        self._backoff_start: StartAgent | None = None
        self.wait_for_restart_s = wait_for_restart_s

    # --- control (called by the reactor and the registry) --------------------------------

    async def ensure(
        self, nursery: trio.Nursery, start: StartAgent, *, stops_seen: int | None = None
    ) -> AgentPort:
        """The ready adapter, starting the listener task in ``nursery`` if it is not
        running. While a stop is under way it waits for it to end, then starts the agent
        anew; while a restart is due within ``wait_for_restart_s`` it waits for it.

        ``stops_seen`` is ``self.stops`` when the start was asked for (default: now). A
        stop asked for after that voids this start: ``StartCancelled``, which is no failure
        (the core asked for the stop and, if it wants one, a new start after it). Otherwise
        (a long backoff, a disposal, a start that keeps failing) it raises
        ``AgentUnavailable`` naming the last error."""
        if stops_seen is None:
            stops_seen = self.stops
        self._waiters += 1
        try:
            with trio.move_on_after(self.start_timeout_s):
                while True:
                    if self.stops != stops_seen:
                        raise StartCancelled("a stop came after this start was asked for")
                    if self.adapter is not None and not self._stopping:
                        return self.adapter
                    if not self.running:
                        first = self._make_adapter(start)
                        self._stopping = self._report_stop = False
                        self.running = True
                        self._done = trio.Event()
                        nursery.start_soon(self._run, start, first)
                    elif self._stopping and self._report_stop:
                        raise AgentUnavailable("the thread is being closed")
                    elif self._stopping:
                        # The previous agent is still going away (a StopAgent, or a start
                        # cut short by one): this start follows once it has gone.
                        await self._done.wait()
                        continue
                    elif self.backing_off and start != self._backoff_start:
                        # Another agent, workdir, model or session than the one that
                        # failed (a new conversation, /workdir set): start it now.
                        self._backoff_start = None
                        self._notify()
                    elif (
                        self.backing_off
                        and self._restart_at - trio.current_time() > self.wait_for_restart_s
                    ):
                        raise AgentUnavailable(
                            f"the agent is not running ({self._last_error or 'it exited'}); "
                            f"next start in {self._restart_at - trio.current_time():.0f} s"
                        )
                    await self._changed_event().wait()
        finally:
            self._waiters -= 1
        raise AgentUnavailable(f"the agent did not start within {self.start_timeout_s:g} s")

    async def stop(self, reason: str, *, report: bool = False) -> None:
        """Stop the agent for good (its whole process tree) and end the listener task.

        A stop the core asked for (``StopAgent``) is not reported back: the core already
        set the agent stopped, and an ``AgentExited`` arriving later would end whatever run
        the core started meanwhile. Disposal stops with ``report=True`` so the core ends
        the run and dismisses its prompts. Every stop voids the starts asked for before it,
        even one whose task has not begun yet (``ensure``'s ``stops_seen``)."""
        self.stops += 1
        self._notify()
        if not self.running:
            return
        self._stopping = True
        self._report_stop = report
        if self._start_scope is not None:
            self._start_scope.cancel()
        self._notify()
        adapter = self.adapter
        if adapter is not None:
            logger.info("stopping the agent: %s", reason, extra=self._ctx())
            await adapter.stop()
        await self._done.wait()

    # --- the task ------------------------------------------------------------------------

    def _make_adapter(self, start: StartAgent) -> AgentPort:
        """A fresh adapter from the factory. One it cannot make (an unknown agent name, say
        one recorded in an old log) is ``AgentUnavailable`` for whoever asked: reported to
        the thread, never raised into the thread's nursery."""
        try:
            return self._factory(start, self.thread_id)
        except Exception as exc:
            self._last_error = _describe(exc)
            # Info: whoever asked reports it (the core logs the failed effect as a warning).
            logger.info("cannot make the agent adapter: %s", self._last_error, extra=self._ctx())
            raise AgentUnavailable(_reason(exc)) from None

    async def _run(self, start: StartAgent, first: AgentPort | None = None) -> None:
        try:
            while not self._stopping:
                started_at = trio.current_time()
                connected = await self._serve_once(start, first)
                first = None
                if self._stopping:
                    break
                next_start = self._current_start()
                if next_start is None:
                    break  # the conversation ended: nothing to keep alive
                if not connected and not self._waiters:
                    # A start that failed with nobody waiting for it: the next StartAgent or
                    # PromptAgent tries again, rather than a retry loop nobody asked for.
                    break
                start = next_start
                delay = self.backoff.delay(trio.current_time(), trio.current_time() - started_at)
                logger.warning(
                    "agent %s (%s); starting again in %.1f s",
                    "exited" if connected else "failed to start",
                    self._last_error or "no error",
                    delay,
                    extra=self._ctx(),
                )
                self.backing_off = True
                self._backoff_start = start
                self._restart_at = trio.current_time() + delay
                self._notify()
                with trio.move_on_after(delay):
                    while not self._stopping and self._backoff_start is not None:
                        await self._changed_event().wait()
                self.backing_off = False
                self._backoff_start = None
                # What to start is read again: the conversation may have changed while
                # this waited (else the old agent would be started once more).
                latest = self._current_start()
                if latest is None:
                    break
                start = latest
        finally:
            self.running = False
            self.backing_off = False
            self.adapter = None
            self._done.set()
            self._notify()

    async def _serve_once(self, start: StartAgent, adapter: AgentPort | None = None) -> bool:
        """One agent process/connection, start to end; True if it got ready. Only an agent
        that got ready is reported: AgentConnected on ready, AgentExited when it ends. A
        failed start is reported by whoever asked for it (``ensure`` raises)."""
        self.starts += 1
        self.backoff.record_start(trio.current_time())
        self._last_error = ""
        connected = False
        try:
            if adapter is None:
                adapter = self._make_adapter(start)
            async with trio.open_nursery() as nursery:
                # A start that hangs is given up after start_timeout_s, and stop() cancels
                # one in progress (there is no adapter to stop yet).
                with trio.CancelScope(deadline=trio.current_time() + self.start_timeout_s) as scope:
                    self._start_scope = scope
                    await nursery.start(adapter.serve, start, self._emit)
                self._start_scope = None
                if scope.cancelled_caught:
                    nursery.cancel_scope.cancel()
                    if not self._stopping:
                        raise AgentUnavailable(
                            f"the agent did not get ready within {self.start_timeout_s:g} s"
                        )
                else:
                    connected = True
                    self.adapter = adapter
                    self._flush_merging()  # what it said while starting comes first
                    self._post(
                        self._action(
                            AgentConnected,
                            session_id=start.session_id,
                            capabilities=adapter.capabilities,
                        )
                    )
                    self._notify()
                    if self._stopping:  # stop() came while we were starting
                        await adapter.stop()
        except Exception as exc:  # a failing adapter is reported, never fatal to the actor
            self._last_error = _describe(exc)
            logger.warning("agent adapter failed: %s", self._last_error, extra=self._ctx())
        finally:
            self.adapter = None
            self._start_scope = None
        self._flush_merging()  # the last deltas before the exit come before it
        self.exits += 1
        if not connected:
            self._last_error = self._last_error or "the agent exited before it was ready"
        elif not self._stopping or self._report_stop:
            self._post(
                self._action(
                    AgentExited,
                    exit_code=None,
                    crashed=not self._stopping,
                    stderr_tail=self._last_error,
                )
            )
        self._notify()
        return connected

    async def _emit(self, stamped: StampedEvent) -> None:
        """Post the event as an action, or merge it (coalescing at the source).

        The first event of a scheduler round is posted at once. A text or thinking delta
        after it in the same round was read in the same go (the reader yields when it waits
        for the pipe): it is merged with the deltas that follow it in the round, in stream
        order, into one action posted when the round ends (``RoundEnd``) or when an event
        that does not continue it comes. So no delta waits for the agent to say more; under
        load a read holds more lines, and an action carries more deltas. While reads keep
        holding several events (the last round with events had more than one), the
        round's first delta is merged too: one action per read instead of two, at the
        price of the rest of the round, which its followers wait anyway; a read of one
        event ends that. A merge stays within ``MERGE_MAX_CHARS``; the action is what the
        log records, so replay matches."""
        event = stamped.event
        if isinstance(event, _DELTAS):
            if len(event.text) > MAX_EVENT_CHARS:
                # A delta too long for one action (a 30 MB line from a command agent, say):
                # its pieces, in order, each an action of its own or merged as any delta.
                for piece in split_delta(event):
                    await self._emit(StampedEvent(stamped.run_id, stamped.session_id, piece))
                return
            size = len(event.text)
        else:
            bounded = bounded_event(event)
            if bounded is not event:
                stamped = StampedEvent(stamped.run_id, stamped.session_id, bounded)
                event = bounded
            size = 0 if isinstance(event, _KEPT_PAST_LIMIT) else len(event.model_dump_json())
        if stamped.run_id != self._output_run:
            self._output_run, self._output_chars = stamped.run_id, 0
        self._output_chars += size
        if size and self._output_chars > RUN_OUTPUT_LIMIT_CHARS:
            self.dropped_events += 1
            if self._output_chars - size > RUN_OUTPUT_LIMIT_CHARS:
                return  # (the notice went with the first one past the limit)
            event = AgentError(
                message=(
                    f"The agent wrote more than {RUN_OUTPUT_LIMIT_CHARS:,} characters in this "
                    "turn: the rest of what it writes in it is dropped, neither shown nor "
                    "kept. /abort stops it."
                )
            )
            stamped = StampedEvent(stamped.run_id, stamped.session_id, event)
        self._round_events += 1
        merging = self._merging
        if merging is not None:
            if (
                isinstance(event, _DELTAS)
                and stamped.run_id == merging.run_id
                and stamped.session_id == merging.session_id
                and continues_delta(merging.first, event)
                and merging.chars + len(event.text) <= MERGE_MAX_CHARS
            ):
                merging.texts.append(event.text)
                merging.chars += len(event.text)
                self.merged_deltas += 1
                return
            self._flush_merging()
        if not self._in_round and self._round_end is not None:
            self._in_round = self._round_end.call_soon(self._end_round)
        if (
            self._in_round
            and (self._round_events > 1 or self._reads_hold_more)
            and isinstance(event, _DELTAS)
        ):
            self._merging = _Merging(stamped, event, self._clock())
            return
        if isinstance(event, _DELTAS):
            # The hot path: built without validation from a delta the adapter made (a
            # pydantic model already) and the listener's own ids and stamps.
            self._post(
                AgentEventReceived.trusted(
                    thread_id=self.thread_id,
                    action_id=self._ids(),
                    at=self._clock(),
                    run_id=stamped.run_id,
                    session_id=stamped.session_id,
                    event=event,
                )
            )
        else:
            self._post(
                self._action(
                    AgentEventReceived,
                    run_id=stamped.run_id,
                    session_id=stamped.session_id,
                    event=event,
                )
            )
        # A chatty agent must not starve the actor (nor anyone): an event that follows the
        # previous one within EMIT_BURST_S yields. One arriving alone does not: the adapter
        # waited for it (a pipe read yields), and a yield after it would cost every delta
        # a scheduler round for nothing. (Merged deltas cost no action: they never yield.)
        now = trio.current_time()
        burst = now - self._last_emit < EMIT_BURST_S
        self._last_emit = now
        if burst:
            await trio.lowlevel.checkpoint()

    def _end_round(self) -> None:
        self._in_round = False
        self._reads_hold_more = self._round_events > 1
        self._round_events = 0
        self._flush_merging()

    def _flush_merging(self) -> None:
        merging, self._merging = self._merging, None
        if merging is None:
            return
        event = (
            merging.first if len(merging.texts) == 1 else joined_delta(merging.first, merging.texts)
        )
        self._post(
            AgentEventReceived.trusted(  # a delta, as in ``_emit``
                thread_id=self.thread_id,
                action_id=self._ids(),
                at=merging.at,
                run_id=merging.run_id,
                session_id=merging.session_id,
                event=event,
            )
        )

    def _action(self, cls: type, **fields: object) -> Action:
        return cls(thread_id=self.thread_id, action_id=self._ids(), at=self._clock(), **fields)  # type: ignore[no-any-return]

    def _ctx(self) -> dict[str, str]:
        return {"thread_id": self.thread_id, "run": "", "action": "listener"}

    def _notify(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    def _changed_event(self) -> trio.Event:
        if self._changed is None:
            self._changed = trio.Event()
        return self._changed


def _describe(exc: BaseException) -> str:
    """A one-line reason, looking inside the exception groups nurseries wrap errors in."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def _reason(exc: BaseException) -> str:
    """What an exception says, for a user (a KeyError's quotes and all)."""
    text = str(exc)
    return text or type(exc).__name__

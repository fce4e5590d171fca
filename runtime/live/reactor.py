"""The reactor: applies one thread's committed effects, in commit order, and reports back.

Invariants:

- Effects of an action are applied only once that action is durable in the log
  (``ThreadLog.when_durable`` hands them to their lane then), so a crash can lose an effect
  but never show one whose cause the log forgot.
- Effects go into two lanes, each applied one at a time in commit order: the **agent
  lane** (start, prompt, interrupt, stop, answers) and the **chat lane** (everything the
  renderer shows). A chat effect stuck in a long 429 ``retry_after`` (the renderer waits
  and retries) must not hold an ``InterruptAgent`` behind it, or ``/abort`` would take as
  long as Discord's rate limit. Nothing needs an order *between* the lanes: the core only
  asks the agent something the user answered in the chat, which the chat lane showed first.
- A ``PromptAgent`` whose run the core has ended by the time it is sent is not sent.
- A command reply or a prompt (``_URGENT_CHAT``) keeps its place in the chat lane, but
  the renderer is told at once that it waits there (an optional ``expedite(n)`` on the
  renderer: +n when submitted, -1 once applied), so the renderer's requests of the
  effects ahead of it go at its urgency, not behind other threads' posts.
- Consecutive ``AppendOutput``s of one output (same key, consecutive ``seq``) that are
  waiting together are handed to the renderer as one append of their joined text, with
  the last ``seq``: the chat shows the same text, and a stream of deltas committed in a
  batch (or piled up behind a rate-limited call) costs one renderer call, not one each.
- An effect the renderer can apply without waiting (``apply_nowait``: an append to a
  streamed message already posted) is applied by the log's flush itself when the chat
  lane holds and applies nothing, instead of waking the lane's task: the same order, one
  task step less per delta (``Reactor._apply_now``).
- The reactor changes no state. It reports only by posting actions into the thread's
  queue: ``OutputPosted`` for each (key, message ids) the renderer reports,
  ``EffectFailed`` for an effect that raised (the actor never sees the exception).
  ``AgentConnected``/``AgentExited`` come from the listener it drives.

Chat effects go to the thread's renderer (``ports.RendererPort``:
``effects.render.StreamRenderer`` in production, ``testkit.fake_chat.RecordingRenderer`` in
tests). The posts a renderer makes on its own (the StreamRenderer's background task sends
a stream's first message one pacing interval after it opens) reach the reactor's
``report_posted`` through the renderer's ``on_posted``, so they become ``OutputPosted``
too. Agent effects go to the thread's ``AgentListener`` and its adapter. ``LogNote``s never
get here: the actor logs them at commit and hands over only the effects the world sees.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import trio

from threadspindle.runtime.core.actions import (
    Action,
    ConversationResumed,
    ConversationRolledBack,
    EffectFailed,
    OutputPosted,
    ThreadForked,
    UserMessage,
)
from threadspindle.runtime.core.effect_types import (
    WORKSPACE_EFFECTS,
    AnswerPermission,
    AnswerQuestion,
    AppendOutput,
    DismissPrompt,
    Effect,
    InterruptAgent,
    OpenThread,
    PromptAgent,
    ReplyToCommand,
    RollbackAgent,
    RunShell,
    ShowPermissionPrompt,
    ShowQuestion,
    StartAgent,
    SteerAgent,
    StopAgent,
)
from threadspindle.runtime.core.frozen import Frozen
from threadspindle.runtime.live.inbox import Inbox
from threadspindle.runtime.live.listener import AgentListener, StartCancelled
from threadspindle.runtime.live.ports import (
    AgentShell,
    AgentShellOf,
    NoWorkspace,
    RendererPort,
    ThreadLog,
    ThreadOpener,
    WorkspacePort,
)

__all__ = ["Reactor", "ReactorStatistics"]

logger = logging.getLogger("spindle.reactor")

# Chat effects someone waits for (a command's answer, what the agent asks): the renderer
# hurries the effects ahead of them in the lane (``Reactor._expedite``).
_URGENT_CHAT = (ReplyToCommand, ShowPermissionPrompt, ShowQuestion, DismissPrompt)

_AGENT_EFFECTS = (
    StartAgent,
    PromptAgent,
    InterruptAgent,
    SteerAgent,
    StopAgent,
    AnswerPermission,
    AnswerQuestion,
    # Workspace effects share the agent lane: a checkpoint must be recorded before the
    # prompt after it is sent, and a StopShell must not wait behind a chat rate limit.
    *WORKSPACE_EFFECTS,
    OpenThread,
    # Before the undo/redo job after it: the files end as git restores them.
    RollbackAgent,
)
ROLLBACK_TIMEOUT_S = 60.0  # starting the agent for it included

# Effect type -> whether it goes to the agent lane: one dict lookup per effect instead of an
# isinstance over the classes above (every effect is classified twice, at submit and at
# apply).
_AGENT_EFFECT_TYPES: dict[type, bool] = {}


def _is_agent_effect(effect: Effect) -> bool:
    kind = type(effect)
    found = _AGENT_EFFECT_TYPES.get(kind)
    if found is None:
        found = _AGENT_EFFECT_TYPES[kind] = issubclass(kind, _AGENT_EFFECTS)
    return found


class Reactor:
    """Applies one thread's effects in order; see the module docstring for the contract."""

    def __init__(
        self,
        thread_id: str,
        *,
        renderer: RendererPort,
        listener: AgentListener,
        log: ThreadLog,
        post: Callable[[Action], object],
        clock: Callable[[], float],
        ids: Callable[[], str],
        current_run: Callable[[], str | None] = lambda: None,
        workspace: WorkspacePort | None = None,
        thread_opener: ThreadOpener | None = None,
        post_elsewhere: Callable[[Action], Awaitable[object]] | None = None,
    ) -> None:
        self.thread_id = thread_id
        self.workspace = workspace or NoWorkspace(thread_id, post, clock, ids)
        self._thread_opener = thread_opener
        self._post_elsewhere = post_elsewhere
        self._current_run = current_run
        self.renderer = renderer
        self.listener = listener
        self._log = log
        self._post = post
        self._clock = clock
        self._ids = ids
        self._agent_lane = _Lane("agent")
        self._chat_lane = _Lane("chat")
        self._nursery: trio.Nursery | None = None
        self.pending = 0  # effects handed over and not yet applied (both lanes)
        self.applied = 0
        self.failed = 0
        self.skipped_prompts = 0
        self.coalesced = 0  # appends handed to the renderer inside another one
        self.applied_at_once = 0  # chat effects applied by ``_apply_now``, not the lane
        self._idle_now = True  # nothing pending
        self._idle: trio.Event | None = None  # set when idle again, for ``wait_idle``
        self._wire_background_posts()

    def _wire_background_posts(self) -> None:
        """Make ``report_posted`` the renderer's callback for the posts it makes by itself,
        keeping (and still calling) one its owner set."""
        renderer = self.renderer
        owner_callback = renderer.on_posted
        if owner_callback is None:
            renderer.on_posted = self.report_posted
            return

        def both(key: str, message_ids: tuple[str, ...]) -> None:
            owner_callback(key, message_ids)
            self.report_posted(key, message_ids)

        renderer.on_posted = both

    def report_posted(self, key: str, message_ids: Sequence[str]) -> None:
        """Report an output the renderer posted (``OutputPosted``), whoever made the call."""
        self._report(OutputPosted, key=key, message_ids=tuple(message_ids))

    def submit(self, ticket: int, effects: tuple[Effect, ...]) -> None:
        """Queue the effects of the action with durability ``ticket`` (actor only). Each
        lane gets them once the log says the ticket is durable (``ThreadLog.when_durable``):
        a lane holds only effects it may apply, and wakes once for them."""
        if not effects:
            return
        self.pending += len(effects)
        self._idle_now = False
        agent: list[Effect] = []
        chat: list[Effect] = []
        for effect in effects:
            (agent if _is_agent_effect(effect) else chat).append(effect)
        if agent:
            self._agent_lane.pending += len(agent)
        if chat:
            self._chat_lane.pending += len(chat)
            urgent = sum(isinstance(effect, _URGENT_CHAT) for effect in chat)
            if urgent:
                self._expedite(urgent)
        log = self._log
        log.when_durable(ticket, lambda: self._deliver(ticket, agent, chat))
        if agent:
            # An interrupt, a prompt or an answer goes ahead of the streaming traffic:
            # the log is flushed now instead of on the flusher's turn, a round later.
            log.flush_now()

    def _deliver(self, ticket: int, agent: list[Effect], chat: list[Effect]) -> None:
        """Hand effects to their lanes (called by the SQLite log's flush, once durable)."""
        if agent:
            self._deliver_to(self._agent_lane, ticket, agent)
        if chat:
            chat = self._apply_now(chat)
            if chat:
                self._deliver_to(self._chat_lane, ticket, chat)

    def _apply_now(self, effects: list[Effect]) -> list[Effect]:
        """Apply at once, in order, the leading effects the renderer takes without waiting
        (``apply_nowait``: an append to a streamed message, the commonest effect), when the
        chat lane holds nothing and applies nothing (its task parked, or not started):
        then nothing is ahead of them, and the lane's task need not wake for a delta.
        Returns the effects left for the lane, from the first one it must apply."""
        apply_nowait = getattr(self.renderer, "apply_nowait", None)
        lane = self._chat_lane
        if (
            apply_nowait is None
            or len(lane.recv)
            or (lane.started and not lane.recv.receiver_waiting)
        ):
            return effects
        done = 0
        for effect in effects:
            try:
                posted = apply_nowait(effect)
            except Exception as exc:  # as ``apply`` reports it
                self._failed(effect, exc)
            else:
                if posted is None:
                    break
                for key, message_ids in posted:
                    self.report_posted(key, message_ids)
                self.applied += 1
            done += 1
        if done:
            self.applied_at_once += done
            lane.pending -= done
            self.pending -= done
            if self.pending == 0:
                self._set_idle()
        return effects[done:]

    def _deliver_to(self, lane: _Lane, ticket: int, effects: list[Effect]) -> None:
        lane.deliver(ticket, effects)
        if not lane.started and self._nursery is not None:
            # A lane's task starts with its first effects: a thread that only answered
            # commands never starts its agent lane's task.
            lane.started = True
            try:
                self._nursery.start_soon(self._run_lane, lane)
            except RuntimeError:
                pass  # the thread's nursery has closed (disposed): nobody applies them

    def _set_idle(self) -> None:
        self._idle_now = True
        if self._idle is not None:
            self._idle.set()
            self._idle = None

    async def wait_idle(self) -> None:
        if self._idle_now:
            await trio.lowlevel.checkpoint()
            return
        if self._idle is None:
            self._idle = trio.Event()  # made only when someone waits: not once per batch
        await self._idle.wait()

    def attach(self, nursery: trio.Nursery) -> None:
        """Run in the thread's ``nursery``: each lane's task starts there with the lane's
        first effects (an idle thread holds no task it does not use), and so do the
        listener and the workspace's background work."""
        self._nursery = nursery
        for lane in (self._agent_lane, self._chat_lane):
            if len(lane.recv) and not lane.started:
                lane.started = True
                nursery.start_soon(self._run_lane, lane)

    async def _run_lane(self, lane: _Lane) -> None:
        async for first in lane.recv:
            # Take every durable batch already delivered: they go out in commit order.
            batches = [first]
            recv = lane.recv
            while len(recv):
                batches.append(recv.receive_nowait())
            last = batches[-1][0]
            if not self._log.is_durable(last):  # (the SQLite log delivers durable batches)
                await self._log.wait_durable(last)
            if len(batches) == 1 and len(first[1]) == 1:
                merged: list[tuple[Effect, int]] = [(first[1][0], 1)]  # the usual wake
            else:
                merged = _coalesce_appends(batches)
            for effect, count in merged:
                await self.apply(effect)
                lane.pending -= count
                self.pending -= count
                self.coalesced += count - 1
                if isinstance(effect, _URGENT_CHAT):
                    self._expedite(-1)
            if self.pending == 0:
                self._set_idle()
            # Not kept while the lane waits: a thread gone idle would hold its last effects
            # (a turn's last text, its footer) for as long as it lives.
            del first, batches, merged, effect

    def _expedite(self, urgent: int) -> None:
        """Tell a renderer that can hurry (``StreamRenderer.expedite``) how many more (or
        fewer) urgent effects wait in the chat lane."""
        expedite = getattr(self.renderer, "expedite", None)
        if expedite is not None:
            expedite(urgent)

    async def apply(self, effect: Effect) -> None:
        try:
            if _is_agent_effect(effect):
                await self._apply_agent(effect)
            else:
                for key, message_ids in await self.renderer.apply(effect):
                    self.report_posted(key, message_ids)
            self.applied += 1
        except trio.Cancelled:
            raise
        except Exception as exc:  # reported as an action; the actor never sees it raise
            self._failed(effect, exc)

    def _failed(self, effect: Effect, exc: Exception) -> None:
        self.failed += 1
        reason = f"{type(exc).__name__}: {exc}"
        # Info: the core logs the EffectFailed reported here as a warning (one line a
        # failure, not three in the console: here, the listener, the core).
        logger.info("effect %s failed: %s", effect.type, reason, extra=self._ctx(effect))
        self._report(
            EffectFailed, effect=effect.type, key=getattr(effect, "key", None), reason=reason
        )

    async def _apply_agent(self, effect: Effect) -> None:
        assert self._nursery is not None
        listener = self.listener
        if isinstance(effect, WORKSPACE_EFFECTS):
            # The port runs slow work in the nursery and reports back by actions.
            agent = None
            if isinstance(effect, RunShell) and effect.via_agent is not None:
                agent = self._agent_shell_of(effect.via_agent)
            await self.workspace.apply(effect, self._nursery, agent)
        elif isinstance(effect, OpenThread):
            # Opening a thread takes platform calls: never hold the agent lane for it.
            self._nursery.start_soon(self._open_thread, effect)
        elif isinstance(effect, StartAgent):
            # Starting an agent takes seconds: do not hold the thread's chat output (the
            # "Started ..." reply comes right after this effect) until it is ready. A
            # PromptAgent after it waits for the same start; a failure is still reported.
            self._nursery.start_soon(self._start_agent, effect, listener.stops)
        elif isinstance(effect, PromptAgent):
            adapter = await listener.ensure(self._nursery, StartAgent.of(effect))
            if self._current_run() != effect.run_id:
                # The core ended this run while the prompt waited here (the agent died and
                # its restart was awaited): no agent may start a turn nobody listens to,
                # it would hold up the prompts after it.
                self.skipped_prompts += 1
                logger.info("prompt of an ended run not sent", extra=self._ctx(effect))
                return
            await adapter.prompt(effect)
        elif isinstance(effect, StopAgent):
            await listener.stop(effect.reason)
        elif isinstance(effect, RollbackAgent):
            await self._rollback(effect)
        else:
            live = listener.adapter
            if live is None:
                # Nothing to interrupt or answer: the agent is gone, and its exit is
                # already on its way to the core as AgentExited.
                logger.info("%s with no agent running", effect.type, extra=self._ctx(effect))
                return
            if isinstance(effect, InterruptAgent):
                await live.interrupt(effect.run_id)
            elif isinstance(effect, SteerAgent):
                if self._current_run() != effect.run_id:
                    # That run is over: the core has put the text back in the queue.
                    logger.info("steer of an ended run not sent", extra=self._ctx(effect))
                    return
                await live.steer(effect)
            elif isinstance(effect, AnswerPermission):
                await live.answer_permission(effect.request_id, effect.allow)
            elif isinstance(effect, AnswerQuestion):
                await live.answer_question(effect.request_id, effect.answer)

    def _agent_shell_of(self, start: StartAgent) -> AgentShellOf:
        """How the workspace port gets the agent's shell for a `!` command (in its task,
        not on this lane): the agent started if need be; None when it has no shell."""

        async def agent_shell() -> AgentShell | None:
            assert self._nursery is not None
            adapter = await self.listener.ensure(self._nursery, start)
            return adapter.shell if adapter.capabilities.shell else None

        return agent_shell

    async def _rollback(self, effect: RollbackAgent) -> None:
        """/undo, /redo: roll the agent's conversation natively (starting the agent if none
        runs) and always answer ``ConversationRolledBack``, so the core knows whether the
        agent still needs to be told by a note."""
        assert self._nursery is not None
        ok, restorable, detail = False, False, ""
        try:
            with trio.fail_after(ROLLBACK_TIMEOUT_S):
                adapter = await self.listener.ensure(self._nursery, effect.start)
                caps = adapter.capabilities
                if caps.rollback if effect.op == "undo" else caps.restore:
                    await adapter.rollback(effect)
                    ok, restorable = True, caps.restore
                else:
                    way = "back" if effect.op == "undo" else "forward"
                    detail = f"{adapter.name} cannot roll its conversation {way}"
        except trio.Cancelled:
            raise
        except Exception as exc:  # the CLI refused, or no agent: the note fallback
            detail = f"{type(exc).__name__}: {exc}"
            logger.warning("rollback failed: %s", detail, extra=self._ctx(effect))
        self._report(
            ConversationRolledBack,
            job_id=effect.job_id,
            op=effect.op,
            run_id=effect.run_id,
            ok=ok,
            restorable=restorable,
            detail=detail,
        )

    async def _start_agent(self, effect: StartAgent, stops_seen: int) -> None:
        """Start the agent in the background; a later ``StopAgent`` voids this start (the
        core asked for it, so that is no failure to report)."""
        assert self._nursery is not None
        try:
            await self.listener.ensure(self._nursery, effect, stops_seen=stops_seen)
        except StartCancelled:
            logger.info("start superseded by a later stop", extra=self._ctx(effect))
        except Exception as exc:
            self.failed += 1
            reason = f"{type(exc).__name__}: {exc}"
            logger.info("effect start_agent failed: %s", reason, extra=self._ctx(effect))
            self._report(EffectFailed, effect=effect.type, key=None, reason=reason)

    async def _open_thread(self, effect: OpenThread) -> None:
        """``/fork``, ``/btw``: the platform opens the thread; the runtime seeds it with a
        conversation forking the session (and the question as its first prompt), then
        tells this thread (``ThreadForked``), or reports the failure (``EffectFailed``)."""
        try:
            if self._thread_opener is None or self._post_elsewhere is None:
                raise RuntimeError("this chat platform cannot open threads")
            new_thread, label = await self._thread_opener(self.thread_id, effect.title)
            at = self._clock()
            await self._post_elsewhere(
                ConversationResumed(
                    thread_id=new_thread,
                    at=at,
                    action_id=f"{effect.key}/start",
                    agent=effect.agent,
                    session_id=effect.session_id,
                    requested_workdir=effect.workdir,
                    resolved_workdir=effect.workdir,
                    model=effect.model,
                    system_instruction=effect.system_instruction,
                    fork=True,
                )
            )
            if effect.prompt is not None:
                await self._post_elsewhere(
                    UserMessage(
                        thread_id=new_thread,
                        at=at,
                        action_id=f"{effect.key}/prompt",
                        author_id=effect.author_id,
                        author_name=effect.author_name,
                        text=effect.prompt,
                    )
                )
        except trio.Cancelled:
            raise
        except Exception as exc:
            self.failed += 1
            reason = f"{type(exc).__name__}: {exc}"
            logger.warning("effect open_thread failed: %s", reason, extra=self._ctx(effect))
            self._report(EffectFailed, effect=effect.type, key=effect.key, reason=reason)
            return
        self._report(ThreadForked, key=effect.key, new_thread_id=new_thread, label=label)

    def _ctx(self, effect: Effect) -> dict[str, str]:
        run_id = getattr(effect, "run_id", None) or ""
        return {"thread_id": self.thread_id, "run": run_id, "action": f"effect:{effect.type}"}

    def _report(self, cls: type, **fields: object) -> None:
        self._post(cls(thread_id=self.thread_id, action_id=self._ids(), at=self._clock(), **fields))

    def statistics(self) -> ReactorStatistics:
        return ReactorStatistics(
            pending=self.pending,
            agent_pending=self._agent_lane.pending,
            chat_pending=self._chat_lane.pending,
            applied=self.applied,
            failed=self.failed,
            skipped_prompts=self.skipped_prompts,
            coalesced=self.coalesced,
            applied_at_once=self.applied_at_once,
        )


class ReactorStatistics(Frozen):
    """A snapshot of one thread's reactor (``Reactor.statistics()``)."""

    pending: int  # effects handed over and not yet applied, both lanes
    agent_pending: int
    chat_pending: int
    applied: int
    failed: int  # effects that raised (each reported as EffectFailed)
    skipped_prompts: int  # prompts of a run the core ended before they could be sent
    coalesced: int  # appends handed to the renderer inside another one
    applied_at_once: int = 0  # chat effects applied from the flush, not by the lane's task


def _coalesce_appends(
    batches: Sequence[tuple[int, Sequence[Effect]]],
) -> list[tuple[Effect, int]]:
    """The batches' effects in order, each with how many committed effects it stands for:
    a run of ``AppendOutput``s continuing one another (same key, ``seq`` one more each
    time) becomes one append of the joined text carrying the last ``seq``."""
    merged: list[tuple[Effect, int]] = []
    texts: list[str] = []  # the run of appends being joined (joined once, at its end)

    def close_run() -> None:
        if len(texts) > 1:
            last, count = merged[-1]
            assert isinstance(last, AppendOutput)
            # Built without validation: key, seq and texts come from validated effects.
            joined = AppendOutput.model_construct(key=last.key, seq=last.seq, text="".join(texts))
            merged[-1] = (joined, count)
        texts.clear()

    for _, effects in batches:
        for effect in effects:
            if type(effect) is AppendOutput and texts:
                last, count = merged[-1]
                # (``last`` is an append whenever ``texts`` holds a run of them.)
                if (
                    isinstance(last, AppendOutput)
                    and last.key == effect.key
                    and effect.seq == last.seq + 1
                ):
                    texts.append(effect.text)
                    # Keep the newest seq in the slot; the text is joined at the end.
                    merged[-1] = (effect, count + 1)
                    continue
            close_run()
            merged.append((effect, 1))
            if type(effect) is AppendOutput:
                texts.append(effect.text)
    close_run()
    return merged


class _Lane:
    """One ordered queue of durable effect batches and its count (``pending`` counts the
    effects submitted and not yet applied, durable or not)."""

    __slots__ = ("name", "send", "recv", "pending", "started")

    def __init__(self, name: str) -> None:
        self.name = name
        self.send = self.recv = Inbox[tuple[int, list[Effect]]]()
        self.pending = 0
        self.started = False  # its task runs (``Reactor._deliver_to`` starts it)

    def deliver(self, ticket: int, effects: list[Effect]) -> None:
        try:
            self.send.send_nowait((ticket, effects))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass  # the thread is gone (disposed): nobody applies its effects any more

"""One transition's scratchpad (``Step``) and the moves every handler shares.

``Step`` holds the state being built, the effects emitted and the note; the moves here
(interrupt a run, end it, dismiss prompts, start the agent, judge a workdir) are the pieces
the handlers in ``transitions_user`` and ``transitions_agent`` are made of. Pure, like all
of the core: no I/O, no clock.
"""

from __future__ import annotations

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core import effect_types as F
from threadspindle.runtime.core.frozen import Frozen
from threadspindle.runtime.core.guards import phase
from threadspindle.runtime.core.model import (
    AgentStatus,
    Blocker,
    Phase,
    QueueItem,
    Run,
    ThreadState,
)
from threadspindle.runtime.core.phase_table import PhaseEvent, next_phase

__all__ = [
    "IllegalMove",
    "Step",
    "Transition",
    "close_run",
    "dismiss_blockers",
    "end_run",
    "find_blocker",
    "finish_retry_line",
    "interrupt_run",
    "move",
    "requeue_steers",
    "restart_agent",
    "retry_summary",
    "start_agent",
    "workdir_problem",
]

RECENT_ACTIONS = 64  # how many action ids are remembered to drop duplicate deliveries
RECENT_KEYS = 256  # how many emitted output keys the state keeps
TOOL_RESULT_CHARS = 600  # a tool card shows at most this much of the result
MARKER_CHARS = 200
RETRY_DETAIL_CHARS = 200  # the retry status line shows this much of the CLI's error


class Transition(Frozen):
    state: ThreadState
    effects: tuple[F.Effect, ...] = ()
    note: str | None = None


class Step:
    """The mutable scratchpad of one transition; frozen models are rebuilt as it goes."""

    def __init__(self, state: ThreadState, action: A.ActionBase) -> None:
        self.state = state
        self.action = action
        self.effects: list[F.Effect] = []
        self.note: str | None = None
        self._counts: dict[str, int] = {}

    # state helpers -----------------------------------------------------------------------
    def set(self, **update: object) -> None:
        self.state = self.state.replace(**update)

    def set_run(self, **update: object) -> None:
        assert self.state.run is not None
        self.set(run=self.state.run.replace(**update))

    def count(self, name: str, n: int = 1) -> None:
        self._counts[name] = self._counts.get(name, 0) + n

    def emit(self, effect: F.Effect) -> None:
        self.effects.append(effect)

    def record(self, reason: str, counter: str = "ignored") -> None:
        """The action made no sense (or was refused): count it and say why."""
        self.count(counter)
        self.note = reason

    def refuse(self, text: str, reason: str, counter: str = "ignored") -> None:
        """Tell the user (only them) why their command did nothing, and record it."""
        self.reply(text, ephemeral=True)
        self.record(reason, counter)

    def finish(self) -> Transition:
        state = self.state
        update: dict[str, object] = {}
        if self._counts:
            counters = state.counters
            update["counters"] = counters.replace(
                **{k: getattr(counters, k) + v for k, v in self._counts.items()}
            )
        effects = self.effects
        if effects:
            new_keys = tuple([e.key for e in effects if isinstance(e, F.KEYED_POSTS)])
            if new_keys:
                update["emitted_keys"] = (state.emitted_keys + new_keys)[-RECENT_KEYS:]
        if state.last_note != self.note:
            update["last_note"] = self.note
        if update:
            state = state.replace(**update)
        return Transition.trusted(state=state, effects=tuple(effects), note=self.note)

    # output helpers ----------------------------------------------------------------------
    @property
    def thread(self) -> str:
        return self.state.thread_id

    def reply(
        self, text: str, *, ephemeral: bool = False, buttons: tuple[F.Button, ...] = ()
    ) -> None:
        self.count("replies")
        self.emit(
            F.ReplyToCommand(
                key=f"{self.thread}/reply/{self.action.action_id}",
                action_id=self.action.action_id,
                text=text,
                ephemeral=ephemeral,
                buttons=buttons,
            )
        )

    def new_run_key(self) -> str:
        run = self.state.run
        assert run is not None
        key = f"{self.thread}/{run.id}/{run.parts}"
        self.set_run(parts=run.parts + 1)
        return key

    def post(self, kind: F.OutputKind, text: str) -> str:
        key = self.new_run_key()
        run = self.state.run
        assert run is not None
        self.emit(F.PostOutput(key=key, kind=kind, text=text, run_id=run.id))
        return key

    def seal_open_part(self) -> None:
        run = self.state.run
        if run is not None and run.open_part is not None:
            self.emit(F.SealOutput(key=run.open_part.key))
            self.set_run(open_part=None)


# --- shared moves ----------------------------------------------------------------------


class IllegalMove(Exception):
    """A phase move the table does not have. Raised inside a transition only: ``transition``
    catches it and records the action (counter ``illegal_moves`` and a note), so nothing the
    step did before the move takes effect and nothing escapes the core."""

    def __init__(self, current: Phase, event: PhaseEvent) -> None:
        super().__init__(f"illegal phase move: no {event} from {current.value}")


def move(
    step: Step, event: PhaseEvent, *, run_id: str | None = None, prompt: QueueItem | None = None
) -> None:
    """Apply the phase table's edge for ``event``: the only writer of a run's phase.

    Leaving IDLE opens the run (``run_id`` and ``prompt`` say which); reaching IDLE closes
    it (``close_run`` has tidied it up first). A move the table does not have raises
    ``IllegalMove``, which the transition records."""
    run = step.state.run
    current = phase(step.state)
    target = next_phase(current, event)
    if target is None:
        raise IllegalMove(current, event)
    if target is current:
        return
    if target is Phase.IDLE:
        step.set(run=None)
    elif run is None:
        assert run_id is not None and prompt is not None, "opening a run needs its id and prompt"
        at = step.action.at
        step.set(run=Run(id=run_id, prompt=prompt, phase=target, started_at=at, last_event_at=at))
    else:
        step.set_run(phase=target)


def dismiss_blockers(step: Step, outcome: str, *, answer_agent: bool) -> None:
    """Close every pending prompt; deny/dismiss it to the agent when it still waits."""
    for b in step.state.blockers:
        if answer_agent:
            if b.kind == "permission":
                step.emit(F.AnswerPermission(request_id=b.request_id, allow=False))
            else:
                step.emit(F.AnswerQuestion(request_id=b.request_id, answer=None))
        step.emit(F.DismissPrompt(key=b.key, request_id=b.request_id, outcome=outcome))
    step.set(blockers=())


def interrupt_run(step: Step, reason: str) -> None:
    """Ask the agent to end the active run in-band; the run gets no footer. Typing stops
    now: nothing the run does from here on is shown, however long the agent takes to stop."""
    run = step.state.run
    assert run is not None
    if run.phase is not Phase.INTERRUPTING:
        step.seal_open_part()
        step.emit(F.InterruptAgent(run_id=run.id))
        step.emit(F.Typing(on=False))
        step.set_run(interrupt_at=step.action.at)
    if run.end_reason is None:
        step.set_run(end_reason=reason)
    move(step, "interrupt")


def retry_summary(retries: int, *, answered: bool) -> str:
    """The final text of a run's retry status line."""
    times = f"{retries} retr{'y' if retries == 1 else 'ies'}"
    if answered:
        return f"The model API was unreachable — it answered after {times}."
    return f"⚠ The model API was unreachable — {times}, then the run ended."


def finish_retry_line(step: Step, *, answered: bool) -> None:
    """The run's retry status line (if it has one) gets its final text (``answered``: the
    model answered in the end)."""
    run = step.state.run
    if run is not None and run.retry_key is not None:
        step.emit(
            F.EditOutput(key=run.retry_key, text=retry_summary(run.retries, answered=answered))
        )
        step.set_run(retry_key=None)


def requeue_steers(step: Step, items: tuple[QueueItem, ...]) -> None:
    """Steered messages the running turn did not take go to the head of the queue, in the
    order they were sent: each runs as a normal prompt, once. The queue limit does not
    apply: they were accepted already."""
    run = step.state.run
    if run is not None and items:
        ids = {i.id for i in items}
        step.set_run(steers=tuple(s for s in run.steers if s.id not in ids))
    step.set(queue=items + step.state.queue)


def close_run(step: Step) -> None:
    """Tidy the active run up before it ends: close its outputs, retry status line and
    prompts, stop typing, requeue the steered messages it did not take. The phase move
    that ends it comes after (``end_run``)."""
    run = step.state.run
    assert run is not None
    requeue_steers(step, run.steers)
    step.seal_open_part()
    finish_retry_line(step, answered=False)
    dismiss_blockers(step, "Expired: the run ended.", answer_agent=False)
    step.emit(F.Typing(on=False))
    step.set(last_prompt=run.prompt)


def end_run(step: Step, event: PhaseEvent) -> None:
    """The active run is over: ``close_run``, then the table's move to IDLE for ``event``."""
    close_run(step)
    move(step, event)


def workdir_problem(step: Step, requested: str, resolved: str | None) -> str | None:
    """Why a workdir is refused, or None. ``resolved`` is the real path from ingress, so
    ``..`` and symlinks pointing out of the allowed roots are judged by where they land."""
    if resolved is None:
        # (Ingress resolves only a folder: a file there is None too, so both are said.)
        return f"Workdir {requested!r} does not exist, or is no folder."
    roots = step.state.policy.allowed_roots
    for root in roots:
        root = root.rstrip("/") or "/"
        if resolved == root or resolved.startswith(root + "/") or root == "/":
            return None
    allowed = ", ".join(roots) if roots else "(none configured)"
    return f"Workdir {requested!r} ({resolved}) is outside the allowed roots: {allowed}."


def start_agent(step: Step) -> None:
    conv = step.state.conversation
    assert conv is not None
    step.emit(F.StartAgent.of(conv))
    step.set(agent_status=AgentStatus.STARTING)


def restart_agent(step: Step, reason: str) -> None:
    if step.state.agent_status is not AgentStatus.STOPPED:
        step.emit(F.StopAgent(reason=reason))
    start_agent(step)


def find_blocker(step: Step, request_id: str, kind: str) -> Blocker | None:
    for b in step.state.blockers:
        if b.request_id == request_id and b.kind == kind:
            return b
    return None

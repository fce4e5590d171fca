"""A thread's history as a timeline: runs, queue length, tool calls and permission waits.

``build_timeline(actions)`` folds a thread's logged actions through the same pure
``transition`` the runtime uses (as ``spindle replay`` does) and reads off, action by
action, what the state and its counters say happened: a run opens when the state gets a
new run id and closes when it loses it. How it ended comes from the core itself: the
``completed`` or ``failed`` counter moved, or the run's ``end_reason`` says ``aborted``;
anything else that ended a run (a new message, a timeout, a restart, the thread parked)
is ``interrupted``. Tool calls are the current run's ``ToolStarted``/``ToolFinished``
events, waits the blockers (permission, question) from when they appear to when they are
gone. Nothing here reads a clock: an unfinished run ends at ``now`` (given), else at the
last action.

The actions come from the live log (``LogReader.actions``) or an exported file
(``read_jsonl``): ``timeline_of_db`` and ``timeline_of_file``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core import agent_events as E
from threadspindle.runtime.core.frozen import Frozen
from threadspindle.runtime.core.model import ThreadState
from threadspindle.runtime.core.transitions import transition
from threadspindle.runtime.live.log_read import LogReader, open_read_only
from threadspindle.runtime.live.replay import read_jsonl

__all__ = [
    "OUTCOMES",
    "QueuePoint",
    "RunBar",
    "Timeline",
    "ToolSpan",
    "WaitSpan",
    "build_timeline",
    "timeline_of_db",
    "timeline_of_file",
]

OUTCOMES = ("completed", "interrupted", "aborted", "failed", "running")
PROMPT_CHARS = 120


class RunBar(Frozen):
    run_id: str
    prompt: str
    start: float
    end: float
    outcome: str  # one of OUTCOMES


class ToolSpan(Frozen):
    run_id: str
    name: str
    start: float
    end: float
    finished: bool
    error: bool = False


class WaitSpan(Frozen):
    run_id: str
    kind: str  # "permission" | "question"
    text: str
    start: float
    end: float
    answered: bool


class QueuePoint(Frozen):
    at: float
    length: int


class Timeline(Frozen):
    thread_id: str
    start: float
    end: float
    actions: int
    agent: str | None = None
    workdir: str | None = None
    runs: tuple[RunBar, ...] = ()
    tools: tuple[ToolSpan, ...] = ()
    waits: tuple[WaitSpan, ...] = ()
    queue: tuple[QueuePoint, ...] = ()  # the queue's length after each change

    @property
    def duration(self) -> float:
        return max(self.end - self.start, 0.0)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= PROMPT_CHARS else text[: PROMPT_CHARS - 1] + "…"


def _outcome(before: ThreadState, after: ThreadState) -> str:
    if after.counters.failed > before.counters.failed:
        return "failed"
    if after.counters.completed > before.counters.completed:
        return "completed"
    assert before.run is not None
    if before.run.end_reason == "aborted" or after.counters.aborts > before.counters.aborts:
        return "aborted"
    return "interrupted"


def build_timeline(
    actions: Iterable[A.Action], *, thread_id: str = "", now: float | None = None
) -> Timeline:
    """The timeline of one thread's actions, in log order (see the module docstring)."""
    state: ThreadState | None = None
    runs: list[RunBar] = []
    tools: list[ToolSpan] = []
    waits: list[WaitSpan] = []
    queue: list[QueuePoint] = []
    open_run: tuple[str, str, float] | None = None  # id, prompt, start
    open_tools: dict[tuple[str, str], tuple[str, float]] = {}  # (run, tool id) -> name, start
    open_waits: dict[str, tuple[str, str, str, float]] = {}  # request -> run, kind, text, start
    first = last = None
    count = 0
    for action in actions:
        count += 1
        first = action.at if first is None else first
        last = action.at
        if state is None:
            state = ThreadState.new(action.thread_id)
            thread_id = thread_id or action.thread_id
        before = state
        state = transition(before, action).state
        at = action.at
        # Tool calls: only the current run's (another run's events change nothing).
        if (
            isinstance(action, A.AgentEventReceived)
            and before.run is not None
            and action.run_id == before.run.id
        ):
            event = action.event
            if isinstance(event, E.ToolStarted):
                open_tools[(before.run.id, event.tool_id)] = (event.display_name or event.name, at)
            elif isinstance(event, E.ToolFinished):
                started = open_tools.pop((before.run.id, event.tool_id), None)
                if started is not None:
                    name, start = started
                    tools.append(
                        ToolSpan(
                            run_id=before.run.id,
                            name=name,
                            start=start,
                            end=at,
                            finished=True,
                            error=event.is_error,
                        )
                    )
        # Waits: blockers appearing and going.
        now_pending = {b.request_id: b for b in state.blockers}
        for request, (run_id, kind, text, start) in list(open_waits.items()):
            if request not in now_pending:
                del open_waits[request]
                answered = isinstance(action, A.PermissionAnswered | A.QuestionAnswered)
                waits.append(
                    WaitSpan(
                        run_id=run_id, kind=kind, text=text, start=start, end=at, answered=answered
                    )
                )
        for request, blocker in now_pending.items():
            if request not in open_waits:
                open_waits[request] = (blocker.run_id, blocker.kind, _short(blocker.text), at)
        # Runs: a new run id opens one, losing it closes it.
        old_id = before.run.id if before.run is not None else None
        new_id = state.run.id if state.run is not None else None
        if old_id != new_id:
            if old_id is not None and open_run is not None:
                run_id, prompt, start = open_run
                runs.append(
                    RunBar(
                        run_id=run_id,
                        prompt=prompt,
                        start=start,
                        end=at,
                        outcome=_outcome(before, state),
                    )
                )
                for (tool_run, tool_id), (name, tool_start) in list(open_tools.items()):
                    if tool_run == run_id:
                        del open_tools[(tool_run, tool_id)]
                        tools.append(
                            ToolSpan(
                                run_id=run_id, name=name, start=tool_start, end=at, finished=False
                            )
                        )
                open_run = None
            if state.run is not None:
                open_run = (state.run.id, _short(state.run.prompt.text), state.run.started_at)
        if len(state.queue) != len(before.queue) or not queue:
            queue.append(QueuePoint(at=at, length=len(state.queue)))
    if first is None or last is None or state is None:
        return Timeline(thread_id=thread_id, start=0.0, end=0.0, actions=0)
    end = max(last, now) if now is not None else last
    if open_run is not None:
        run_id, prompt, start = open_run
        runs.append(RunBar(run_id=run_id, prompt=prompt, start=start, end=end, outcome="running"))
    for (run_id, _), (name, start) in open_tools.items():
        tools.append(ToolSpan(run_id=run_id, name=name, start=start, end=end, finished=False))
    for _, (run_id, kind, text, start) in open_waits.items():
        waits.append(
            WaitSpan(run_id=run_id, kind=kind, text=text, start=start, end=end, answered=False)
        )
    conversation = state.conversation
    return Timeline(
        thread_id=thread_id,
        start=first,
        end=end,
        actions=count,
        agent=conversation.agent if conversation else None,
        workdir=conversation.workdir if conversation else None,
        runs=tuple(runs),
        tools=tuple(sorted(tools, key=lambda t: t.start)),
        waits=tuple(sorted(waits, key=lambda w: w.start)),
        queue=tuple(queue),
    )


def timeline_of_db(
    db_path: str | os.PathLike[str], thread_id: str, *, now: float | None = None
) -> Timeline:
    """The timeline of ``thread_id`` in a live Spindle's database (read-only: it may be
    writing). ``KeyError`` when the thread has no action there; ``LogError`` when a row
    cannot be read."""
    path = Path(db_path)
    conn = open_read_only(path)
    try:
        reader = LogReader(conn, path)
        timeline = build_timeline(
            (row.action for row in reader.actions(thread_id)), thread_id=thread_id, now=now
        )
    finally:
        conn.close()
    if timeline.actions == 0:
        raise KeyError(thread_id)
    return timeline


def timeline_of_file(path: str | os.PathLike[str]) -> Timeline:
    """The timeline of an exported log (``spindle log export``). ``OSError`` when it cannot
    be read, ``ValueError`` when a line is not a valid log line."""
    with open(path, encoding="utf-8") as f:
        return timeline_of_lines(f, str(path))


def timeline_of_lines(lines: Iterable[str], source: str = "<log>") -> Timeline:
    """The timeline of exported log lines (an upload); ``ValueError`` for a bad line."""
    return build_timeline(action for _, action in read_jsonl(lines, source))

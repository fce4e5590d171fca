"""Build actions for one thread with fresh ids and a moving clock, for tests and benches.

``ThreadScript("t1").user("hello")`` returns a ``UserMessage`` stamped with the next id and a
time a little after the previous action's: stories read like the chat they describe.
"""

from __future__ import annotations

from typing import Any

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core import agent_events as E
from threadspindle.runtime.core.model import AgentCapabilities, Policy, Verbosity

__all__ = ["ThreadScript"]


class ThreadScript:
    def __init__(self, thread_id: str = "t1", *, start: float = 1_000.0, step: float = 0.1) -> None:
        self.thread_id = thread_id
        self.now = start
        self.step = step
        self._n = 0

    def _base(self, at: float | None = None) -> dict[str, Any]:
        self._n += 1
        self.now = at if at is not None else self.now + self.step
        return {"thread_id": self.thread_id, "action_id": f"a{self._n}", "at": self.now}

    def advance(self, seconds: float) -> None:
        self.now += seconds

    # user ingress
    def user(
        self, text: str, *, interrupt: bool = True, author: str = "u1", source: str | None = None
    ) -> A.UserMessage:
        return A.UserMessage(
            **self._base(),
            author_id=author,
            author_name=author,
            text=text,
            interrupt=interrupt,
            source_message_id=source,
        )

    def queue(self, text: str, *, author: str = "u1", source: str | None = None) -> A.QueueCommand:
        return A.QueueCommand(
            **self._base(),
            author_id=author,
            author_name=author,
            text=text,
            source_message_id=source,
        )

    def steer(self, text: str, *, author: str = "u1", source: str | None = None) -> A.SteerCommand:
        return A.SteerCommand(
            **self._base(),
            author_id=author,
            author_name=author,
            text=text,
            source_message_id=source,
        )

    def compact(self, *, author: str = "u1") -> A.CompactRequested:
        return A.CompactRequested(**self._base(), author_id=author, author_name=author)

    def fork(self, question: str | None = None, *, author: str = "u1") -> A.ForkRequested:
        return A.ForkRequested(
            **self._base(), author_id=author, author_name=author, question=question
        )

    def forked(self, key: str, new_thread_id: str, label: str = "") -> A.ThreadForked:
        return A.ThreadForked(
            **self._base(), key=key, new_thread_id=new_thread_id, label=label or new_thread_id
        )

    def abort(self) -> A.AbortRequested:
        return A.AbortRequested(**self._base())

    def clear(self, position: int | None = None) -> A.QueueCleared:
        return A.QueueCleared(**self._base(), position=position)

    def remove(self, item_id: str) -> A.QueuedItemRemoved:
        return A.QueuedItemRemoved(**self._base(), item_id=item_id)

    def edited(self, source: str, text: str) -> A.SourceMessageEdited:
        return A.SourceMessageEdited(**self._base(), source_message_id=source, text=text)

    def deleted(self, source: str) -> A.SourceMessageDeleted:
        return A.SourceMessageDeleted(**self._base(), source_message_id=source)

    def start(
        self,
        agent: str = "claude",
        workdir: str = "/work/app",
        resolved: str | None = "/work/app",
        **kw: Any,
    ) -> A.ConversationStarted:
        return A.ConversationStarted(
            **self._base(), agent=agent, requested_workdir=workdir, resolved_workdir=resolved, **kw
        )

    def resume(
        self,
        session_id: str,
        agent: str = "claude",
        workdir: str = "/work/app",
        resolved: str | None = "/work/app",
    ) -> A.ConversationResumed:
        return A.ConversationResumed(
            **self._base(),
            agent=agent,
            session_id=session_id,
            requested_workdir=workdir,
            resolved_workdir=resolved,
        )

    def end(self) -> A.ConversationEnded:
        return A.ConversationEnded(**self._base())

    def workdir(self, requested: str, resolved: str | None) -> A.WorkdirSet:
        return A.WorkdirSet(**self._base(), requested_workdir=requested, resolved_workdir=resolved)

    def model(self, name: str) -> A.ModelChanged:
        return A.ModelChanged(**self._base(), model=name)

    def status(self) -> A.StatusRequested:
        return A.StatusRequested(**self._base())

    def allow(self, request_id: str, allow: bool = True) -> A.PermissionAnswered:
        return A.PermissionAnswered(**self._base(), request_id=request_id, allow=allow)

    def answer(self, request_id: str, answer: str) -> A.QuestionAnswered:
        return A.QuestionAnswered(**self._base(), request_id=request_id, answer=answer)

    # agent events
    def agent(
        self, run_id: str | None, event: E.AgentEvent, session_id: str | None = None
    ) -> A.AgentEventReceived:
        return A.AgentEventReceived(
            **self._base(), run_id=run_id, session_id=session_id, event=event
        )

    def text(self, run_id: str | None, text: str, block: str | None = None) -> A.AgentEventReceived:
        return self.agent(run_id, E.TextDelta(text=text, block=block))

    def tool(
        self, run_id: str, tool_id: str, name: str = "Bash", summary: str = "ls"
    ) -> A.AgentEventReceived:
        return self.agent(
            run_id,
            E.ToolStarted(tool_id=tool_id, name=name, display_name=name, input_summary=summary),
        )

    def tool_done(
        self, run_id: str, tool_id: str, result: str = "ok", is_error: bool = False
    ) -> A.AgentEventReceived:
        return self.agent(run_id, E.ToolFinished(tool_id=tool_id, result=result, is_error=is_error))

    def permission(self, run_id: str, request_id: str, tool: str = "Bash") -> A.AgentEventReceived:
        return self.agent(
            run_id, E.PermissionRequested(request_id=request_id, tool=tool, detail="touch x")
        )

    def question(self, run_id: str, request_id: str) -> A.AgentEventReceived:
        return self.agent(
            run_id, E.QuestionAsked(request_id=request_id, question="Which?", options=("a", "b"))
        )

    def done(
        self, run_id: str | None, session_id: str | None = "s1", **kw: Any
    ) -> A.AgentEventReceived:
        return self.agent(
            run_id,
            E.TurnCompleted(
                session_id=session_id, cost_usd=0.01, duration_ms=1200, model="m", **kw
            ),
        )

    def aborted(self, run_id: str | None, reason: str = "interrupted") -> A.AgentEventReceived:
        return self.agent(run_id, E.TurnAborted(reason=reason))

    # feedback and runtime
    def posted(self, key: str, *ids: str) -> A.OutputPosted:
        return A.OutputPosted(**self._base(), key=key, message_ids=ids)

    def failed(self, effect: str, reason: str = "boom", key: str | None = None) -> A.EffectFailed:
        return A.EffectFailed(**self._base(), effect=effect, reason=reason, key=key)

    def connected(
        self,
        session_id: str | None = None,
        *,
        steer: bool | None = None,
        compact: bool = False,
        fork: bool = False,
        rollback: bool = False,
        restore: bool = False,
        shell: bool = False,
    ) -> A.AgentConnected:
        """What the adapter declares it can do (``steer`` None: no report at all)."""
        caps = None
        if steer is not None:
            caps = AgentCapabilities(
                steer=steer,
                compact=compact,
                fork=fork,
                rollback=rollback,
                restore=restore,
                shell=shell,
            )
        return A.AgentConnected(**self._base(), session_id=session_id, capabilities=caps)

    def exited(self, code: int | None = 1, crashed: bool = True, stderr: str = "") -> A.AgentExited:
        return A.AgentExited(**self._base(), exit_code=code, crashed=crashed, stderr_tail=stderr)

    def tick(self, after: float = 1.0) -> A.Tick:
        return A.Tick(**self._base(self.now + after))

    def recovered(self) -> A.RuntimeRecovered:
        return A.RuntimeRecovered(**self._base())

    def parked(self, reason: str = "shutting down") -> A.ThreadParked:
        return A.ThreadParked(**self._base(), reason=reason)

    def policy(self, policy: Policy) -> A.PolicySet:
        return A.PolicySet(**self._base(), policy=policy)

    # schedules, verbosity, titles
    def schedule(
        self,
        text: str,
        due_at: float,
        *,
        cron: str | None = None,
        wakeup: bool = False,
        author: str = "u1",
        label: str = "",
    ) -> A.ScheduleAdded:
        return A.ScheduleAdded(
            **self._base(),
            author_id=author,
            author_name=author,
            text=text,
            due_at=due_at,
            cron=cron,
            label=label,
            wakeup=wakeup,
        )

    def cancel_schedule(self, schedule_id: str) -> A.ScheduleCancelled:
        return A.ScheduleCancelled(**self._base(), schedule_id=schedule_id)

    def list_schedules(self) -> A.SchedulesListed:
        return A.SchedulesListed(**self._base())

    def due(
        self, schedule_id: str, due_at: float, next_due_at: float | None = None
    ) -> A.ScheduleDue:
        return A.ScheduleDue(
            **self._base(max(self.now + self.step, due_at)),
            schedule_id=schedule_id,
            due_at=due_at,
            next_due_at=next_due_at,
        )

    def verbosity(self, level: Verbosity) -> A.VerbositySet:
        return A.VerbositySet(**self._base(), verbosity=level)

    def title(self, title: str, run_id: str | None = None) -> A.AgentEventReceived:
        return self.agent(run_id, E.TitleChanged(title=title))

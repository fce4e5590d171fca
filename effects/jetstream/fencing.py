"""A renderer that posts nothing, and an agent that is told nothing, for a thread whose lease
this runner no longer holds.

The log's fence keeps a stale runner from *appending*; effects of actions that were durable
before the lease was lost could still be applied after it (a runner paused mid-run and
resumed after another took over), and the new owner applies them too. ``FencedRenderer``
closes that gap for everything that goes through ``apply``: before each effect it asks the
log whether this runner may still write the thread (``JetStreamLog.may_write``: lease held
and renewed within its TTL, thread not fenced), and refuses otherwise. ``FencedAgent`` does
the same for the agent lane: a resumed runner's queued prompt would have set its agent to
work in the workdir, beside the new owner's, with nothing of it recorded. Stopping and
interrupting always go through: they end work, never start any.
"""

from __future__ import annotations

from collections.abc import Callable

from threadspindle.effects.jetstream.log import JetStreamLog, ThreadFenced
from threadspindle.runtime.core.effect_types import (
    Effect,
    PromptAgent,
    RollbackAgent,
    StartAgent,
    SteerAgent,
)
from threadspindle.runtime.core.model import AgentCapabilities
from threadspindle.runtime.live.ports import (
    AdapterFactory,
    AgentPort,
    EmitEvent,
    OnPosted,
    Posted,
    RendererPort,
)

__all__ = ["FencedAgent", "FencedRenderer", "fenced_agents"]


class _Fence:
    """One thread's check, shared by the renderer and the agent: may this runner still write
    the thread (``JetStreamLog.may_write``)? ``refused`` counts the calls it turned away."""

    def __init__(self, log: JetStreamLog, thread_id: str) -> None:
        self.log = log
        self.thread_id = thread_id
        self.refused = 0

    def _check(self, doing: str) -> None:
        if self.log.may_write(self.thread_id):
            return
        self.refused += 1
        why = self.log.fenced(self.thread_id) or "its lease is not held or not renewed"
        raise ThreadFenced(f"thread {self.thread_id}: not {doing}: {why}")


class FencedRenderer(_Fence):
    """Wraps one thread's renderer (``RendererPort``); every post is refused, not waited
    for, once the lease is no longer valid."""

    def __init__(self, inner: RendererPort, log: JetStreamLog, thread_id: str) -> None:
        super().__init__(log, thread_id)
        self.inner = inner

    @property
    def on_posted(self) -> OnPosted | None:
        return self.inner.on_posted

    @on_posted.setter
    def on_posted(self, value: OnPosted | None) -> None:
        self.inner.on_posted = value

    def known(self, key: str, message_ids: tuple[str, ...]) -> None:
        self.inner.known(key, message_ids)

    async def apply(self, effect: Effect) -> list[Posted]:
        self._check("posting")
        return await self.inner.apply(effect)

    async def aclose(self) -> list[Posted]:
        if not self.log.may_write(self.thread_id):
            return []
        return await self.inner.aclose()


class FencedAgent(_Fence):
    """Wraps one thread's agent adapter (``AgentPort``): whatever would set the agent to
    work is refused once this runner may no longer write the thread."""

    def __init__(self, inner: AgentPort, log: JetStreamLog, thread_id: str) -> None:
        super().__init__(log, thread_id)
        self.inner = inner

    # Read through: an adapter may learn what it can do only once its CLI is up.
    @property
    def name(self) -> str:
        return self.inner.name

    @name.setter
    def name(self, value: str) -> None:
        self.inner.name = value

    @property
    def capabilities(self) -> AgentCapabilities:
        return self.inner.capabilities

    @capabilities.setter
    def capabilities(self, value: AgentCapabilities) -> None:
        self.inner.capabilities = value

    async def serve(self, start: StartAgent, emit: EmitEvent, task_status: object) -> None:
        self._check("starting the agent")
        await self.inner.serve(start, emit, task_status)

    async def prompt(self, prompt: PromptAgent) -> None:
        self._check("prompting the agent")
        await self.inner.prompt(prompt)

    async def interrupt(self, run_id: str) -> None:
        await self.inner.interrupt(run_id)

    async def steer(self, steer: SteerAgent) -> None:
        self._check("steering the agent")
        await self.inner.steer(steer)

    async def rollback(self, rollback: RollbackAgent) -> None:
        self._check("rolling the agent back")
        await self.inner.rollback(rollback)

    async def shell(self, command: str, output: Callable[[str], None]) -> int | None:
        self._check("running a command")
        return await self.inner.shell(command, output)

    async def answer_permission(self, request_id: str, allow: bool) -> None:
        self._check("answering the agent")
        await self.inner.answer_permission(request_id, allow)

    async def answer_question(self, request_id: str, answer: str | None) -> None:
        self._check("answering the agent")
        await self.inner.answer_question(request_id, answer)

    async def stop(self) -> None:
        await self.inner.stop()

    def statistics(self) -> object:
        return self.inner.statistics()


def fenced_agents(factory: AdapterFactory, log: JetStreamLog) -> AdapterFactory:
    """``factory`` with each adapter it makes behind ``FencedAgent``."""

    def make(start: StartAgent, thread_id: str) -> AgentPort:
        return FencedAgent(factory(start, thread_id), log, thread_id)

    return make

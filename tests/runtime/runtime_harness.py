"""Shared pieces of the live-runtime tests (imported as ``runtime_harness``): a runtime on
a real SQLite log in tmp_path, the scripted fake agent, the recording renderer, and a chat
user that makes actions."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.live.log import EventLog
from threadspindle.runtime.live.registry import Runtime, open_runtime
from threadspindle.testkit.fake_agent import FakeAgentWorld
from threadspindle.testkit.fake_chat import RenderWorld


class Chat:
    """Makes ingress actions for one thread, stamped with trio's clock."""

    _ids = itertools.count(1)

    def __init__(self, runtime: Runtime, thread_id: str = "t1", workdir: str = "/tmp") -> None:
        self.runtime = runtime
        self.thread_id = thread_id
        self.workdir = workdir

    def _base(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "action_id": f"u{next(self._ids)}",
            "at": trio.current_time(),
        }

    async def send(self, action: A.Action) -> A.Action:
        receipt = await self.runtime.post(action)
        await receipt.durable()
        return action

    async def start(self, agent: str = "fake") -> A.Action:
        return await self.send(
            A.ConversationStarted(
                **self._base(),
                agent=agent,
                requested_workdir=self.workdir,
                resolved_workdir=self.workdir,
            )
        )

    async def say(self, text: str, *, interrupt: bool = True) -> A.Action:
        return await self.send(
            A.UserMessage(
                **self._base(), author_id="u1", author_name="alice", text=text, interrupt=interrupt
            )
        )

    async def queue(self, text: str) -> A.Action:
        return await self.send(
            A.QueueCommand(**self._base(), author_id="u1", author_name="alice", text=text)
        )

    async def abort(self) -> A.Action:
        return await self.send(A.AbortRequested(**self._base(), author_id="u1"))

    async def allow(self, request_id: str, allow: bool = True) -> A.Action:
        return await self.send(
            A.PermissionAnswered(**self._base(), request_id=request_id, allow=allow)
        )

    async def end(self) -> A.Action:
        return await self.send(A.ConversationEnded(**self._base()))


async def until(predicate: Callable[[], bool], timeout: float = 600.0, step: float = 0.05) -> None:
    """Wait (in trio time; instant under MockClock autojump) until ``predicate()`` holds."""
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(step)


@asynccontextmanager
async def running(
    tmp_path: Path,
    *,
    agents: FakeAgentWorld | None = None,
    chat: RenderWorld | None = None,
    log_name: str = "events.sqlite3",
    log_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> AsyncIterator[Runtime]:
    agents = agents or FakeAgentWorld()
    chat = chat or RenderWorld()
    kwargs.setdefault("policy", Policy(allowed_roots=(str(tmp_path), "/tmp")))
    kwargs.setdefault("clock", trio.current_time)
    kwargs.setdefault("adapter_factory", agents.factory)
    with EventLog(tmp_path / log_name, **(log_options or {})) as log:
        kwargs.setdefault("renderer_factory", chat.renderer)
        async with open_runtime(
            log=log,
            **kwargs,
        ) as runtime:
            runtime.agents = agents  # type: ignore[attr-defined]
            runtime.chat = chat  # type: ignore[attr-defined]
            yield runtime

"""The console's ``/btw``, ``/fork``, ``/steer`` and ``/compact`` over a live runtime with
the scripted fake agent: ``/btw`` opens a named console thread (``fork1``) whose forked
conversation answers the question, while the current thread stays the one typed into."""

from __future__ import annotations

import io
from pathlib import Path

import trio

from threadspindle.ingress.console import ConsoleChat, thread_id_for
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.live.log import EventLog
from threadspindle.runtime.live.registry import open_runtime
from threadspindle.testkit.fake_agent import FakeAgentWorld
from threadspindle.testkit.fake_chat import RenderWorld


async def _until(predicate, timeout: float = 30.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


async def test_btw_opens_a_console_thread_with_the_forked_conversation(tmp_path: Path) -> None:
    agents, chat_world, out = FakeAgentWorld(), RenderWorld(), io.StringIO()
    with EventLog(tmp_path / "events.sqlite3") as log:
        async with open_runtime(
            log=log,
            renderer_factory=chat_world.renderer,
            adapter_factory=agents.factory,
            policy=Policy(allowed_roots=(str(tmp_path),)),
        ) as runtime:
            chat = ConsoleChat(
                runtime, out=out, default_agent="fake", default_workdir=str(tmp_path)
            )
            runtime.thread_opener = chat.open_thread
            main = thread_id_for("main")
            await chat.ensure_conversation()
            await chat.handle_line("hello")
            await _until(
                lambda: (
                    (runtime.snapshot(main) or None) is not None
                    and runtime.snapshot(main).counters.completed == 1
                )
            )
            await chat.handle_line("/btw what is foo?")
            fork = thread_id_for("fork1")
            await _until(
                lambda: (
                    runtime.snapshot(fork) is not None
                    and runtime.snapshot(fork).counters.completed == 1
                )
            )
            assert "fork1" in chat.names and chat.current == "main"
            assert "what is foo?" in [t for _, t in agents.delivered]
            assert len(agents.forks) == 1
            assert "[fork1] opened: btw: what is foo?" in out.getvalue()
            await chat.handle_line("/fork")
            await _until(lambda: "fork2" in chat.names)
            await chat.handle_line("/compact")
            await _until(lambda: runtime.snapshot(main).counters.completed == 2)
            assert [t for _, t in agents.delivered].count("/compact") == 1

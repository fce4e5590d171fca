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


async def test_a_restarted_console_knows_its_threads_and_forks_into_a_new_one(
    tmp_path: Path,
) -> None:
    """The threads of an earlier run come from the log: ``/thread switch`` reaches them,
    and a fork opens ``fork2``, never the earlier run's ``fork1`` again (that would post
    the fork's conversation into a thread with a history of its own)."""
    from threadspindle.effects.console_platform import ConsolePlatform
    from threadspindle.ingress.console import open_console

    agents, out = FakeAgentWorld(), io.StringIO()
    main, fork1 = thread_id_for("main"), thread_id_for("fork1")

    def console(log: EventLog):
        return open_console(
            ConsolePlatform(out, rich=False),
            out=out,
            default_agent="fake",
            default_workdir=str(tmp_path),
            log=log,
            adapter_factory=agents.factory,
            policy=Policy(allowed_roots=(str(tmp_path),)),
        )

    with EventLog(tmp_path / "events.sqlite3") as log:
        async with console(log) as chat:
            await chat.ensure_conversation()
            await chat.handle_line("hello")
            await _until(lambda: chat.runtime.snapshot(main).counters.completed == 1)
            await chat.handle_line("/btw what is foo?")
            await _until(
                lambda: (
                    chat.runtime.snapshot(fork1) is not None
                    and chat.runtime.snapshot(fork1).counters.completed == 1
                )
            )
    with EventLog(tmp_path / "events.sqlite3") as log:
        async with console(log) as chat:
            assert chat.names == ["main", "fork1"]
            await chat.ensure_conversation(announce=True)
            await chat.handle_line("/btw and what is bar?")
            fork2 = thread_id_for("fork2")
            await _until(
                lambda: (
                    chat.runtime.snapshot(fork2) is not None
                    and chat.runtime.snapshot(fork2).counters.completed == 1
                )
            )
            assert chat.runtime.snapshot(fork1).counters.runs == 1  # untouched
            assert "[fork2] opened: btw: and what is bar?" in out.getvalue()
            await chat.handle_line("/thread switch fork1")
            assert chat.current == "fork1"
    assert f"Resumed thread main: fake in {tmp_path} (1 runs so far)." in out.getvalue()

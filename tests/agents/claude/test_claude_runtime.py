"""The whole chain with the genuine Claude Code CLI: chat actions -> the live runtime
(actor, pure transitions, reactor, listener) -> ``ClaudeAdapter`` -> the CLI -> the fake
Anthropic API on 127.0.0.1 -> agent events -> chat outputs in a recording renderer. The
session's title (asked of the CLI after its first turn) becomes the thread's rename."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from threadspindle.agents.base import AgentAdapter, AgentOptions
from threadspindle.agents.claude import ClaudeAdapter
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.effect_types import (
    RenameThread,
    ShowPermissionPrompt,
    StartAgent,
)
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.live.log import EventLog
from threadspindle.runtime.live.registry import Runtime, open_runtime
from threadspindle.testkit.fake_chat import RenderWorld
from threadspindle.testkit.fake_model.anthropic import TITLE, FakeAnthropic

CLAUDE = Path(__file__).resolve().parents[3] / ".agents" / "node_modules" / ".bin" / "claude"
THREAD = "thread-1"

pytestmark = pytest.mark.timeout(120)


class ChatUser:
    _ids = itertools.count(1)

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def _base(self) -> dict[str, Any]:
        return {"thread_id": THREAD, "action_id": f"c{next(self._ids)}", "at": trio.current_time()}

    async def send(self, action: A.Action) -> None:
        receipt = await self.runtime.post(action)
        await receipt.durable()

    async def start(self, workdir: Path) -> None:
        await self.send(
            A.ConversationStarted(
                **self._base(),
                agent="claude",
                requested_workdir=str(workdir),
                resolved_workdir=str(workdir),
            )
        )

    async def resume(self, workdir: Path, session_id: str) -> None:
        await self.send(
            A.ConversationResumed(
                **self._base(),
                agent="claude",
                session_id=session_id,
                requested_workdir=str(workdir),
                resolved_workdir=str(workdir),
            )
        )

    async def say(self, text: str) -> None:
        await self.send(A.UserMessage(**self._base(), author_id="u1", text=text))

    async def allow(self, request_id: str) -> None:
        await self.send(A.PermissionAnswered(**self._base(), request_id=request_id, allow=True))


async def until(predicate: Any, timeout: float = 45.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.05)


async def test_chat_through_the_runtime_to_the_genuine_cli(tmp_path: Path) -> None:
    assert CLAUDE.exists(), "run `make agents` first"
    (tmp_path / "home").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    fake = FakeAnthropic(slow_chunks=40, slow_delay=0.25)
    fake.start()
    options = AgentOptions(
        binary=str(CLAUDE),
        home=str(tmp_path / "home"),
        env=(("ANTHROPIC_BASE_URL", fake.base_url), ("ANTHROPIC_API_KEY", "sk-ant-fake")),
    )
    made: list[AgentAdapter] = []

    def factory(start: StartAgent, thread_id: str) -> AgentAdapter:
        assert start.agent == "claude"
        made.append(ClaudeAdapter(options))
        return made[-1]

    chat_world = RenderWorld()
    try:
        with EventLog(tmp_path / "events.sqlite3") as log:
            async with open_runtime(
                log=log,
                renderer_factory=chat_world.renderer,
                adapter_factory=factory,
                policy=Policy(allowed_roots=(str(tmp_path),)),
                clock=trio.current_time,
            ) as runtime:
                chat = ChatUser(runtime)
                await chat.start(work)
                await chat.say("hello")
                await until(lambda: chat_world.texts(THREAD, "footer"))
                assert "Hello from fake model." in chat_world.texts(THREAD, "text")
                # A new message mid-stream interrupts the run and becomes the next prompt.
                await chat.say("SLOWTEST")
                await until(lambda: any("chunk2" in t for t in chat_world.texts(THREAD, "text")))
                await chat.say("THINKTEST")
                await until(lambda: len(chat_world.texts(THREAD, "footer")) == 2)
                texts = chat_world.texts(THREAD, "text")
                assert "Thought done." in texts
                # The CLI titles the new session (generate_session_title) once a completed
                # turn follows prompts long enough to title ("hello" alone is too short for
                # it): the thread is renamed.
                await until(lambda: RenameThread(title=TITLE) in chat_world.of_thread(THREAD))
                snapshot = runtime.snapshot(THREAD)
                assert snapshot is not None and snapshot.title == TITLE
                asked = [str(r.body) for r in fake.title_requests()]
                assert len(asked) == 1 and "<session>\\nhello\\nSLOWTEST\\n</session>" in asked[0]
                assert not any("chunk39" in t for t in texts)
                assert "Let me think." in chat_world.texts(THREAD, "thinking")

                # A permission prompt rendered in the thread, answered from a "click".
                await chat.say("TOUCHTEST")
                await until(
                    lambda: any(
                        isinstance(e, ShowPermissionPrompt) for e in chat_world.of_thread(THREAD)
                    )
                )
                prompt = next(
                    e for e in chat_world.of_thread(THREAD) if isinstance(e, ShowPermissionPrompt)
                )
                await chat.allow(prompt.request_id)
                await until(lambda: len(chat_world.texts(THREAD, "footer")) == 3)
                assert (work / "touched.txt").exists()
                tools = chat_world.texts(THREAD, "tool")
                assert any("touch touched.txt" in t for t in tools)

                renames = [e for e in chat_world.of_thread(THREAD) if isinstance(e, RenameThread)]
                assert renames == [RenameThread(title=TITLE)]  # titled once, not every turn
                assert len(fake.title_requests()) == 1
                assert len(made) == 1  # one long-lived process served every turn
                assert made[0].processes_started == 1  # type: ignore[attr-defined]
                assert not chat_world.duplicate_keys
        assert made[0].stopped_clean is True  # type: ignore[attr-defined]
    finally:
        fake.stop()


def _live_claude_pids() -> list[int]:
    """This test's live Claude Code processes (psutil), each named by the pid of its guard
    (what ``ManagedProcess.pid`` is)."""
    found = []
    for child in psutil.Process(os.getpid()).children(recursive=True):
        try:
            cmdline = child.cmdline()
            if child.status() != psutil.STATUS_ZOMBIE and str(CLAUDE) in cmdline:
                if not any(part.endswith("process_guard.py") for part in cmdline):
                    found.append(child.ppid())
        except psutil.Error:
            pass
    return found


async def test_resuming_an_unknown_session_through_the_runtime(tmp_path: Path) -> None:
    """``/claude resume <unknown id>``: the first turn runs in a new session, the thread is
    told once, the listener starts once (no retry loop) and no process is left."""
    assert CLAUDE.exists(), "run `make agents` first"
    (tmp_path / "home").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    unknown = "11111111-2222-3333-4444-555555555555"
    fake = FakeAnthropic()
    fake.start()
    options = AgentOptions(
        binary=str(CLAUDE),
        home=str(tmp_path / "home"),
        env=(("ANTHROPIC_BASE_URL", fake.base_url), ("ANTHROPIC_API_KEY", "sk-ant-fake")),
    )
    made: list[ClaudeAdapter] = []

    def factory(start: StartAgent, thread_id: str) -> AgentAdapter:
        made.append(ClaudeAdapter(options))
        return made[-1]

    chat_world = RenderWorld()
    try:
        with EventLog(tmp_path / "events.sqlite3") as log:
            async with open_runtime(
                log=log,
                renderer_factory=chat_world.renderer,
                adapter_factory=factory,
                policy=Policy(allowed_roots=(str(tmp_path),)),
                clock=trio.current_time,
            ) as runtime:
                chat = ChatUser(runtime)
                await chat.resume(work, unknown)
                await chat.say("hello")
                await until(lambda: chat_world.texts(THREAD, "footer"))
                assert "Hello from fake model." in chat_world.texts(THREAD, "text")
                told = [t for t in chat_world.texts(THREAD, "notice") if unknown in t]
                assert len(told) == 1 and "started a new session" in told[0]
                state = runtime.snapshot(THREAD)
                assert state is not None and state.conversation is not None
                new_session = state.conversation.session_id
                assert new_session and new_session != unknown  # later starts resume this one

                await chat.say("hello again")
                await until(lambda: len(chat_world.texts(THREAD, "footer")) == 2)
                await trio.sleep(1.0)  # room for a retry loop to show itself
                assert len([t for t in chat_world.texts(THREAD, "notice") if unknown in t]) == 1
                assert len(made) == 1  # one listener start: no retries with the bad id
                assert made[0].processes_started == 2  # the failed --resume, then anew
                state = runtime.snapshot(THREAD)
                assert state is not None and state.counters.listener_starts == 1
                assert state.counters.completed == 2 and state.counters.failed == 0
                assert state.conversation is not None
                assert state.conversation.session_id == new_session
                assert made[0]._proc is not None
                assert _live_claude_pids() == [made[0]._proc.pid]  # the bad one is gone
        assert made[0].stopped_clean is True
        assert _live_claude_pids() == []
    finally:
        fake.stop()


@pytest.mark.parametrize("failure", ["overloaded", "down"])
async def test_model_api_retries_show_in_the_thread_and_end_at_the_cap(
    tmp_path: Path, failure: str
) -> None:
    """Issue 11.3: with the model API failing, the thread shows one retry status line
    within seconds (edited at each retry) and the turn ends after ``max_retries`` retries
    with its ⚠ notice; the status line is finalised."""
    assert CLAUDE.exists(), "run `make agents` first"
    (tmp_path / "home").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    fake = FakeAnthropic()
    fake.start()
    if failure == "overloaded":
        fake.error_replies = [(529, "overloaded_error")] * 20
    options = AgentOptions(
        binary=str(CLAUDE),
        home=str(tmp_path / "home"),
        env=(("ANTHROPIC_BASE_URL", fake.base_url), ("ANTHROPIC_API_KEY", "sk-ant-fake")),
        max_retries=2,
    )
    chat_world = RenderWorld()
    try:
        with EventLog(tmp_path / "events.sqlite3") as log:
            async with open_runtime(
                log=log,
                renderer_factory=chat_world.renderer,
                adapter_factory=lambda start, thread_id: ClaudeAdapter(options),
                policy=Policy(allowed_roots=(str(tmp_path),)),
                clock=trio.current_time,
            ) as runtime:
                chat = ChatUser(runtime)
                await chat.start(work)
                await until(lambda: runtime.snapshot(THREAD).agent_status.value == "ready")
                if failure == "down":
                    fake.down()  # the CLI started; now nothing answers on that port
                asked_at = trio.current_time()
                await chat.say("hello")
                await until(lambda: chat_world.texts(THREAD, "status"), timeout=30)
                shown_after = trio.current_time() - asked_at
                await until(lambda: runtime.snapshot(THREAD).run is None, timeout=60)
                await runtime.wait_quiet(THREAD)
    finally:
        fake.stop()
    (key,) = [k for k, o in chat_world.outputs.items() if o.kind == "status"]
    shown = [e.text for _, _, e in chat_world.effects if getattr(e, "key", None) == key]
    assert shown[0].startswith("⚠ The model API is unreachable — retry 1 of 2\n-# API request")
    assert shown[1].startswith("⚠ The model API is unreachable — retry 2 of 2")
    assert shown[-1] == "⚠ The model API was unreachable — 2 retries, then the run ended."
    assert len(shown) == 3  # one line: posted once, edited in place
    notices = chat_world.texts(THREAD, "notice")
    assert len(notices) == 1 and notices[0].startswith("⚠ The turn failed")
    assert chat_world.texts(THREAD, "footer") == []
    assert shown_after < 15, f"the first retry showed {shown_after:.1f}s after the prompt"
    if failure == "overloaded":
        assert len(fake.messages_requests()) == 3  # the first try and two retries

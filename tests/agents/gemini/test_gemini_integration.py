"""The Gemini adapter driving the genuine ``gemini`` CLI (``--acp`` and ``-p``) against the
fake Gemini API on 127.0.0.1.

Every test gets its own temp HOME (with a ``~/.gemini/settings.json`` that selects API-key
auth, as a user's would), its own workdir and its own fake server. The CLI is the pinned npm
install in ``.agents`` (``make agents``). The long-lived scenario shares one process across
its turns; teardown stops the adapter and asserts psutil saw no process of the tree left.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from threadspindle.agents.base import AgentOptions, McpServer, StampedEvent
from threadspindle.agents.gemini import GeminiAdapter, list_conversations
from threadspindle.agents.gemini.adapter import DEFAULT_MAX_ATTEMPTS
from threadspindle.agents.gemini.home import shared_gemini_home
from threadspindle.app.agent_factory import process_manager_server
from threadspindle.effects.process import ManagedProcess, tree_pids
from threadspindle.effects.sandbox import Sandbox
from threadspindle.runtime.core.agent_events import (
    AgentError,
    PermissionRequested,
    SessionStarted,
    TextDelta,
    ThinkingDelta,
    ToolFinished,
    ToolStarted,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent
from threadspindle.testkit.fake_model.base import SSEEvent
from threadspindle.testkit.fake_model.gemini import TEXT_ANSWER, FakeGeminiServer, last_user_turn
from threadspindle.testkit.genuine_clis import BWRAP, GEMINI_USER_SETTINGS, cli_path, gemini_options
from threadspindle.testkit.late_reader import lines_after_exit

TURN_TIMEOUT = 45.0
pytestmark = pytest.mark.timeout(180)


def _require_cli() -> None:
    cli_path("gemini")


@pytest.fixture
def fake() -> Iterator[FakeGeminiServer]:
    server = FakeGeminiServer(slow_delay=0.25)
    server.start()
    yield server
    server.stop()


@dataclass
class Session:
    adapter: GeminiAdapter
    workdir: Path
    home: Path
    events: list[StampedEvent] = field(default_factory=list)
    arrived: trio.Event = field(default_factory=trio.Event)
    auto_answer: bool | None = None  # answer permission requests at once (True/False)

    async def emit(self, stamped: StampedEvent) -> None:
        self.events.append(stamped)
        self.arrived.set()
        if isinstance(stamped.event, PermissionRequested) and self.auto_answer is not None:
            await self.adapter.answer_permission(stamped.event.request_id, self.auto_answer)

    async def wait_for(
        self, match: Callable[[StampedEvent], bool], timeout: float = TURN_TIMEOUT
    ) -> StampedEvent:
        with trio.fail_after(timeout):
            while True:
                for stamped in self.events:
                    if match(stamped):
                        return stamped
                self.arrived = trio.Event()
                await self.arrived.wait()

    def of_run(self, run_id: str) -> list[object]:
        return [s.event for s in self.events if s.run_id == run_id]

    def text_of(self, run_id: str) -> str:
        return "".join(e.text for e in self.of_run(run_id) if isinstance(e, TextDelta))

    async def turn(self, run_id: str, text: str, timeout: float = TURN_TIMEOUT) -> StampedEvent:
        """Prompt and wait for the end of that turn (completed or aborted)."""
        await self.adapter.prompt(_prompt(run_id, text, self.workdir))
        return await self.wait_for(
            lambda s: s.run_id == run_id and isinstance(s.event, TurnCompleted | TurnAborted),
            timeout,
        )


def _prompt(run_id: str, text: str, workdir: Path, model: str | None = None) -> PromptAgent:
    return PromptAgent(run_id=run_id, text=text, agent="gemini", workdir=str(workdir), model=model)


def _make_home(tmp_path: Path) -> Path:
    return tmp_path / "home"  # gemini_options writes the user settings into it


def _options(fake: FakeGeminiServer, home: Path, **overrides: object) -> AgentOptions:
    return gemini_options(fake.base_url, home, **overrides)


@asynccontextmanager
async def running_gemini(
    tmp_path: Path,
    fake: FakeGeminiServer,
    *,
    session_id: str | None = None,
    max_attempts: int | None = 1,  # None: from the options' max_retries
    workdir_name: str = "work",
    **overrides: object,
) -> AsyncIterator[Session]:
    _require_cli()
    home = _make_home(tmp_path)
    workdir = tmp_path / workdir_name
    workdir.mkdir(exist_ok=True)
    adapter = GeminiAdapter(_options(fake, home, **overrides), max_attempts=max_attempts)
    session = Session(adapter, workdir, home)
    start = StartAgent(agent="gemini", workdir=str(workdir), session_id=session_id)
    pids: list[int] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(adapter.serve, start, session.emit)
        if adapter._proc is not None:
            pids = tree_pids(adapter._proc.pid)
        try:
            yield session
        finally:
            with trio.CancelScope(shield=True), trio.fail_after(30):
                if adapter._proc is not None:
                    pids += tree_pids(adapter._proc.pid)
                await adapter.stop()
    left = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    assert left == [], f"processes left behind: {left}"
    assert adapter.stopped_clean is True


async def test_long_lived_turns_in_one_process(tmp_path: Path, fake: FakeGeminiServer) -> None:
    """Text, a tool that really runs, a second turn, an interrupt mid-stream then a normal
    turn, and a permission answered yes then no: all in one ``gemini --acp`` process."""
    async with running_gemini(tmp_path, fake) as s:
        pid = s.adapter._proc.pid if s.adapter._proc else None

        end = await s.turn("r1", "hello")
        events = s.of_run("r1")
        assert isinstance(events[0], SessionStarted)
        assert events[0].session_id == s.adapter.session_id
        assert any(isinstance(e, ThinkingDelta) for e in events)
        assert s.text_of("r1") == TEXT_ANSWER
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error
        assert end.event.usage is not None and end.event.usage.output_tokens == 5
        assert end.session_id == s.adapter.session_id
        assert all(e.session_id == s.adapter.session_id for e in s.events)

        # A tool call that really runs in the workdir: the model sees its output.
        (s.workdir / "marker.txt").write_text("x")
        end = await s.turn("r2", "TOOLTEST run echo hi")
        started = [e for e in s.of_run("r2") if isinstance(e, ToolStarted)]
        finished = [e for e in s.of_run("r2") if isinstance(e, ToolFinished)]
        assert [t.name for t in started] == ["run_shell_command"]
        assert started[0].input_summary == "echo hi"
        assert [f.tool_id for f in finished] == [started[0].tool_id] and not finished[0].is_error
        assert "Output: hi" in s.text_of("r2")
        assert isinstance(end.event, TurnCompleted)
        # The same process served both turns (the second without the session_started).
        assert s.adapter._proc is not None and s.adapter._proc.pid == pid
        assert not any(isinstance(e, SessionStarted) for e in s.of_run("r2"))

        # Interrupt in the middle of a slow stream; the process stays and serves the next.
        await s.adapter.prompt(_prompt("r3", "SLOWTEST", s.workdir))
        await s.wait_for(lambda e: e.run_id == "r3" and isinstance(e.event, TextDelta))
        with trio.fail_after(5):
            await s.adapter.interrupt("r3")
            end = await s.wait_for(lambda e: e.run_id == "r3" and e.event.type == "turn_aborted")
        assert end.event.reason == "interrupted"
        assert s.text_of("r3").count("chunk") < 40
        end = await s.turn("r4", "hello after cancel")
        assert isinstance(end.event, TurnCompleted) and s.text_of("r4") == TEXT_ANSWER
        assert s.adapter._proc.pid == pid and s.adapter._proc.returncode is None

        # Permission: yes runs the tool (the file appears) ...
        s.auto_answer = True
        end = await s.turn("r5", "TOUCHTEST")
        asked = [e for e in s.of_run("r5") if isinstance(e, PermissionRequested)]
        assert len(asked) == 1 and asked[0].detail == "touch touched.txt"
        assert (s.workdir / "touched.txt").exists()
        assert any(isinstance(e, ToolFinished) and not e.is_error for e in s.of_run("r5"))
        assert isinstance(end.event, TurnCompleted)
        # ... no does not, and the model is told so.
        (s.workdir / "touched.txt").unlink()
        s.auto_answer = False
        end = await s.turn("r6", "TOUCHTEST")
        assert any(isinstance(e, PermissionRequested) for e in s.of_run("r6"))
        assert not (s.workdir / "touched.txt").exists()
        assert not any(isinstance(e, ToolStarted) for e in s.of_run("r6"))
        assert "canceled by the user" in s.text_of("r6")
        assert isinstance(end.event, TurnCompleted)

        # A permission still pending when the user interrupts: the turn ends in-band.
        s.auto_answer = None
        await s.adapter.prompt(_prompt("r7", "TOUCHTEST", s.workdir))
        await s.wait_for(lambda e: e.run_id == "r7" and isinstance(e.event, PermissionRequested))
        with trio.fail_after(4):  # well before the SIGINT escalation (5 s)
            await s.adapter.interrupt("r7")
            end = await s.wait_for(lambda e: e.run_id == "r7" and e.event.type == "turn_aborted")
        assert end.event.reason == "interrupted" and not (s.workdir / "touched.txt").exists()
        assert s.adapter._proc.pid == pid and s.adapter._proc.returncode is None

        # A model change between turns is applied in place.
        await s.adapter.prompt(_prompt("r8", "hello", s.workdir, model="gemini-2.5-flash"))
        await s.wait_for(lambda e: e.run_id == "r8" and e.event.type == "turn_completed")
        first = s.of_run("r8")[0]
        assert isinstance(first, SessionStarted) and first.model == "gemini-2.5-flash"
        assert "/models/gemini-2.5-flash:streamGenerateContent" in fake.stream_requests()[-1].path
        assert s.adapter._proc.pid == pid

        stats = s.adapter.statistics()
        from_parser = [e for e in s.events if not isinstance(e.event, SessionStarted)]
        assert stats.malformed == 0 and stats.events == len(from_parser)
    # The user's own settings were read, never written; ours went to the private home.
    user_settings = json.loads((s.home / ".gemini" / "settings.json").read_text())
    assert user_settings == GEMINI_USER_SETTINGS


async def test_resume_after_the_process_is_gone(tmp_path: Path, fake: FakeGeminiServer) -> None:
    """A new process loads the session (in the same UTC minute: the guard must hold) and
    the model sees the old history; the replayed history is not emitted as a turn."""
    mcp = McpServer(name="pm", url="http://127.0.0.1:9/mcp", bearer_token="t0ken")
    async with running_gemini(tmp_path, fake, mcp_servers=(mcp,)) as s:
        await s.turn("r1", "remember the word PLUM")
        session_id = s.adapter.session_id
        assert s.adapter.settings_home is not None
        private = Path(s.adapter.settings_home) / ".gemini" / "settings.json"
        settings = json.loads(private.read_text())
        assert settings["general"]["maxAttempts"] == 1
        assert settings["mcpServers"]["pm"]["headers"]["Authorization"] == "Bearer t0ken"
        assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"  # the user's
        assert oct(private.stat().st_mode & 0o777) == "0o600"
    assert session_id
    assert not private.exists()  # the thread's settings (and token) went with its adapter
    shared = shared_gemini_home(s.adapter.options) / ".gemini"
    assert not (shared / "settings.json").exists()

    # Make the collision certain: stamp the chat file with the current UTC minute, as if
    # the session had just been created. Without the guard the load would wipe it.
    pattern = f".gemini/tmp/*/chats/session-*-{session_id[:8]}.jsonl"
    chats = list(shared_gemini_home(s.adapter.options).glob(pattern))
    assert len(chats) == 1
    minute = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H-%M")
    chats[0].rename(chats[0].with_name(f"session-{minute}-{session_id[:8]}.jsonl"))

    before = len(fake.stream_requests())
    async with running_gemini(tmp_path, fake, session_id=session_id) as s2:
        end = await s2.turn("r2", "what was the word?")
        assert s2.adapter.resumed
        first = s2.of_run("r2")[0]
        assert isinstance(first, SessionStarted) and first.session_id == session_id
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error
        assert s2.text_of("r2") == TEXT_ANSWER  # nothing of the replayed history
        assert all(e.run_id == "r2" for e in s2.events)
    history = json.dumps(fake.stream_requests()[before].body)
    assert "remember the word PLUM" in history
    assert last_user_turn(fake.stream_requests()[before].body)[0] == "what was the word?"

    conversations = list_conversations(str(s2.workdir), home=str(s2.home))
    assert [c.session_id for c in conversations] == [session_id]
    assert conversations[0].title == "remember the word PLUM"


async def test_resume_of_an_unknown_session_starts_a_new_one(
    tmp_path: Path, fake: FakeGeminiServer
) -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    async with running_gemini(tmp_path, fake, session_id=missing) as s:
        end = await s.turn("r1", "hello")
        first, notice = s.of_run("r1")[:2]
        assert isinstance(first, SessionStarted) and first.session_id != missing
        assert isinstance(notice, AgentError) and not notice.retryable
        assert missing in notice.message and "new session" in notice.message
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error
        assert not s.adapter.resumed


async def test_model_server_down_ends_the_turn_with_an_error(
    tmp_path: Path, fake: FakeGeminiServer
) -> None:
    fake.down()
    # The adapter's own default retry setting: a dead server must fail fast with it.
    async with running_gemini(tmp_path, fake, max_attempts=DEFAULT_MAX_ATTEMPTS) as s:
        started = trio.current_time()
        end = await s.turn("r1", "hello", timeout=30)
        assert isinstance(end.event, TurnCompleted) and end.event.is_error
        assert "fetch failed" in (end.event.error or "")
        assert trio.current_time() - started < 20
        # The process survives a failed turn.
        assert s.adapter._proc is not None and s.adapter._proc.returncode is None


@pytest.mark.parametrize("per_turn", [False, True], ids=["acp", "per-turn"])
async def test_model_errors_are_retried_max_retries_times_and_said_so(
    tmp_path: Path, fake: FakeGeminiServer, per_turn: bool
) -> None:
    """ACP mode tells its retries only to the CLI's debug log, ``-p`` to stderr: either way
    each retry is a retryable ``AgentError`` saying which one, and ``max_retries`` caps
    them."""
    fake.error_replies = [(503, "The model is overloaded.")] * 5
    running = running_gemini(tmp_path, fake, max_attempts=None, max_retries=1, per_turn=per_turn)
    async with running as s:
        end = await s.turn("r1", "hello", timeout=90)
        retries = [e for e in s.of_run("r1") if isinstance(e, AgentError) and e.retryable]
        assert [(e.attempt, e.max_retries) for e in retries] == [(1, 1)]
        assert "Attempt 1 failed" in retries[0].message
        assert isinstance(end.event, TurnCompleted) and end.event.is_error
    assert len(fake.stream_requests()) == 2  # the first try and one retry


async def test_cli_killed_mid_turn_aborts_the_turn(tmp_path: Path, fake: FakeGeminiServer) -> None:
    async with running_gemini(tmp_path, fake) as s:
        await s.adapter.prompt(_prompt("r1", "SLOWTEST", s.workdir))
        await s.wait_for(lambda e: e.run_id == "r1" and isinstance(e.event, TextDelta))
        assert s.adapter._proc is not None
        # The CLI itself (the guard's child; the guard then reports its exit).
        [cli] = psutil.Process(s.adapter._proc.pid).children()
        os.kill(cli.pid, signal.SIGKILL)
        end = await s.wait_for(lambda e: e.event.type == "turn_aborted", timeout=15)
        assert end.run_id == "r1"
        assert end.event.exit_code == -signal.SIGKILL
        assert [e.type for e in s.of_run("r1")].count("turn_aborted") == 1


async def test_per_turn_fallback(tmp_path: Path, fake: FakeGeminiServer) -> None:
    """``gemini -p -o stream-json``: one process per turn, resumed with ``-r``. The thread
    remembers a session this home does not have: the first turn starts a new one."""
    missing = "00000000-0000-4000-8000-000000000000"
    async with running_gemini(tmp_path, fake, per_turn=True, session_id=missing) as s:
        end = await s.turn("r1", "-v --help hello")  # not read as flags
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error
        assert s.text_of("r1") == TEXT_ANSWER
        assert last_user_turn(fake.stream_requests()[-1].body)[0] == "-v --help hello"
        first, notice = s.of_run("r1")[:2]
        assert isinstance(first, SessionStarted) and first.session_id != missing
        assert isinstance(notice, AgentError) and missing in notice.message
        end = await s.turn("r2", "TOOLTEST")
        assert isinstance(s.of_run("r2")[0], SessionStarted)
        assert s.of_run("r2")[0].session_id == first.session_id  # -r kept the session
        results = [e for e in s.of_run("r2") if isinstance(e, ToolFinished)]
        assert results and results[0].result == "hi"
        await s.adapter.prompt(_prompt("r3", "SLOWTEST", s.workdir))
        await s.wait_for(lambda e: e.run_id == "r3" and isinstance(e.event, TextDelta))
        await s.adapter.interrupt("r3")
        end = await s.wait_for(lambda e: e.run_id == "r3" and e.event.type == "turn_aborted")
        assert end.event.reason.startswith("interrupted")
        assert [e for e in s.events if isinstance(e.event, AgentError)] == [s.events[1]]


async def test_per_turn_prompts_with_a_nul_or_past_the_argument_limit(
    tmp_path: Path, fake: FakeGeminiServer
) -> None:
    """In the one-turn mode the prompt rides on the command line: a NUL (which exec
    refuses) is dropped, and a prompt over Linux's 128 KiB for one argument goes on the
    CLI's stdin instead, whole (before: a crash, and "Argument list too long")."""
    async with running_gemini(tmp_path, fake, per_turn=True) as s:
        end = await s.turn("r1", "hel\x00lo")
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error
        assert last_user_turn(fake.stream_requests()[-1].body)[0] == "hello"
        long = "-v " + " ".join(f"word{i}" for i in range(30_000))  # ~260 KB
        end = await s.turn("r2", long)
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error, s.of_run("r2")
        assert last_user_turn(fake.stream_requests()[-1].body)[0] == long
        assert s.of_run("r2")[0].session_id == s.of_run("r1")[0].session_id  # -r kept it
        end = await s.turn("r3", "hello again")  # and the command line again
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error
        assert last_user_turn(fake.stream_requests()[-1].body)[0] == "hello again"


async def test_mcp_server_injected_through_private_settings(
    tmp_path: Path, fake: FakeGeminiServer
) -> None:
    """The real MCP process manager, handed over in the private settings file: the CLI
    connects with the bearer token and the model's call of its tool runs."""
    from threadspindle.effects.mcp_manager import serve_process_manager
    from threadspindle.effects.mcp_manager.models import ProcessManagerConfig

    config = ProcessManagerConfig(
        port=0,
        token="operator-secret-for-the-test",
        data_dir=tmp_path / "mcp",
        allowed_roots=(tmp_path,),
    )
    async with trio.open_nursery() as nursery:
        manager = await nursery.start(serve_process_manager, config)
        server = process_manager_server(manager, "thread-1", str(tmp_path / "work"))
        async with running_gemini(tmp_path, fake, mcp_servers=(server,)) as s:
            end = await s.turn("r1", "MCPTEST list_processes")
            started = [e for e in s.of_run("r1") if isinstance(e, ToolStarted)]
            finished = [e for e in s.of_run("r1") if isinstance(e, ToolFinished)]
            assert [t.display_name for t in started] == ["Process Manager · List Processes"]
            assert finished and not finished[0].is_error
            assert not any(isinstance(e, PermissionRequested) for e in s.of_run("r1"))
            assert isinstance(end.event, TurnCompleted)
            assert "processes" in s.text_of("r1")  # the tool's answer reached the model
        nursery.cancel_scope.cancel()


class ShellModel(FakeGeminiServer):
    """The fake Gemini API, where ``RUNCMD: <command>`` asks the CLI to run that command."""

    def _stream(self, body: object) -> Iterator[SSEEvent]:
        text, tool_response = last_user_turn(body)
        if tool_response is None and "RUNCMD:" in text:
            command = text.split("RUNCMD:", 1)[1].strip()
            call = {"name": "run_shell_command", "args": {"command": command}}
            candidate = {
                "content": {"role": "model", "parts": [{"functionCall": call}]},
                "index": 0,
                "finishReason": "STOP",
            }
            usage = {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2}
            yield SSEEvent({"candidates": [candidate], "usageMetadata": usage})
            return
        yield from super()._stream(body)


@pytest.mark.parametrize("sandboxed", [False, True], ids=["plain", "bwrap"])
async def test_each_threads_agent_sees_only_its_own_mcp_token(
    tmp_path: Path, sandboxed: bool
) -> None:
    """Two threads of one agent kind (one home), each with its own MCP token: each thread's
    CLI reads its token from its own settings, and no file of the home holds a token (they
    used to share one settings file, holding the token of whichever thread started last).
    In the sandbox, a thread's agent cannot even see the other thread's settings."""
    assert not sandboxed or BWRAP.exists(), "run `make test` (it unpacks bubblewrap in .tools/)"
    fake = ShellModel()
    fake.start()
    tokens = {"a": "tok-AAAA-1", "b": "tok-BBBB-2"}  # found by tok-[A]{4}: not by the pattern
    sandbox = Sandbox(binary=str(BWRAP)) if sandboxed else None

    def thread(name: str) -> Any:
        server = McpServer(name="pm", url="http://127.0.0.1:9/mcp", bearer_token=tokens[name])
        return running_gemini(
            tmp_path, fake, workdir_name=f"work-{name}", mcp_servers=(server,), sandbox=sandbox
        )

    async def run(session: Session, run_id: str, command: str) -> str:
        """What the agent's shell command printed (the tool's result and the model's echo)."""
        session.auto_answer = True
        end = await session.turn(run_id, f"RUNCMD: {command}")
        assert isinstance(end.event, TurnCompleted)
        events = session.of_run(run_id)
        results = [e.result for e in events if isinstance(e, ToolFinished)]
        return ("\n".join(results) + session.text_of(run_id)).replace("\\n", "\n")

    try:
        async with thread("a") as a, thread("b") as b:
            threads = {"a": a, "b": b}
            # First, before any agent printed a token (its transcript would hold it): no
            # file of the home (the shared session store included) holds one.
            search = "grep -rlE 'tok-[A]{4}|tok-[B]{4}' \"$HOME\""
            for name, session in threads.items():
                found = await run(session, f"{name}1", f"echo FILES:; {search}; echo :FILES")
                assert "FILES:\n:FILES" in found, found
            # Then each agent reads the settings its CLI runs with: its own token only.
            for name, other in (("a", "b"), ("b", "a")):
                me, them = threads[name], threads[other]
                assert me.adapter.settings_home and them.adapter.settings_home
                command = 'cat "$GEMINI_CLI_HOME/.gemini/settings.json"'
                if sandboxed:  # outside the sandbox the user may read every file anyway
                    assert me.adapter._proc is not None
                    assert str(BWRAP) in psutil.Process(me.adapter._proc.pid).cmdline()
                    others = Path(them.adapter.settings_home) / ".gemini" / "settings.json"
                    command += f"; cat {others}"
                seen = await run(me, f"{name}2", command)
                assert tokens[name] in seen and tokens[other] not in seen, seen
                if sandboxed:
                    assert "No such file or directory" in seen, seen
    finally:
        fake.stop()


async def test_a_long_prompts_answer_is_not_lost_when_the_cli_exits_before_it_is_read(
    tmp_path: Path, fake: FakeGeminiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-p`` echoes the prompt first; Node queues what its stdout pipe cannot take and
    drops the queue at exit. With the model quick and Spindle's reader behind (here: it
    reads only once the CLI is gone), a long prompt's echo filled the 64 KiB pipe and the
    answer and the ``result`` behind it were lost ("exited without a result"; seen on CI).
    The stdout pipe now has room for the echo."""

    monkeypatch.setattr(ManagedProcess, "stdout_lines", lines_after_exit)
    async with running_gemini(tmp_path, fake, per_turn=True) as s:
        for run_id, text in (
            ("r1", "-v " + " ".join(f"word{i}" for i in range(10_000))),  # on the command line
            ("r2", "-v " + " ".join(f"word{i}" for i in range(30_000))),  # on stdin
        ):
            end = await s.turn(run_id, text)
            assert isinstance(end.event, TurnCompleted) and not end.event.is_error, end
            assert s.text_of(run_id) == "Hello from fake model."
            assert last_user_turn(fake.stream_requests()[-1].body)[0] == text


async def test_a_prompt_the_cli_did_not_read_from_stdin_in_time_is_fed_again(
    tmp_path: Path, fake: FakeGeminiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI waits 500 ms for a piped prompt's first bytes, then exits 42 "No input
    provided via stdin" (a loaded machine: its timer is due before it reads them). That
    exit is also the one of a refused ``-r``: before, the adapter took it for one and
    started a new conversation (and that process had already wiped the history: ``-r``
    starts the chat file anew, under the minute's name, before reading it back). Now the
    same prompt goes to a new process, resuming the same session with its history. Here
    the first write is held back until the CLI gives up."""
    feed = ManagedProcess.feed_stdin
    held: list[int] = []

    async def late_once(proc: ManagedProcess, text: str) -> None:
        if not held:
            held.append(proc.pid)
            await trio.sleep_forever()  # never written: the CLI's timer fires
        await feed(proc, text)

    monkeypatch.setattr(ManagedProcess, "feed_stdin", late_once)
    async with running_gemini(tmp_path, fake, per_turn=True) as s:
        end = await s.turn("r1", "hello")
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error
        long = "-v " + " ".join(f"word{i}" for i in range(30_000))  # on stdin
        end = await s.turn("r2", long)
        assert held, "the first write was not held back"
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error
        assert last_user_turn(fake.stream_requests()[-1].body)[0] == long
        assert s.of_run("r2")[0].session_id == s.of_run("r1")[0].session_id
        assert not [e for e in s.of_run("r2") if isinstance(e, AgentError)]  # no "new session"
        # The conversation's history reached the model with it: the first process, which
        # started the chat file anew before it gave up, did not wipe it.
        texts = json.dumps(fake.stream_requests()[-1].body.get("contents"))
        assert '"hello"' in texts and "Hello from fake model." in texts

"""The Claude Code adapter driving the genuine ``claude`` CLI against the fake Anthropic API.

Every test gets its own temp HOME and workdir and its own fake server on 127.0.0.1; the CLI
is the pinned npm install in ``.agents`` (``make agents``). Teardown stops the adapter and
asserts psutil saw no process of the tree left.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
import trio

from threadspindle.agents.base import AgentOptions, AgentStartError, McpServer, StampedEvent
from threadspindle.agents.claude import ClaudeAdapter, list_conversations
from threadspindle.app.agent_factory import process_manager_server
from threadspindle.effects.process import tree_pids
from threadspindle.runtime.core.agent_events import (
    AgentError,
    PermissionRequested,
    QuestionAsked,
    SessionStarted,
    TextDelta,
    ThinkingDelta,
    ToolFinished,
    ToolStarted,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent
from threadspindle.runtime.core.model import Attachment
from threadspindle.testkit.fake_model.anthropic import ASK_QUESTION, FakeAnthropic, user_text
from threadspindle.testkit.fake_model.base import JSONResponse
from threadspindle.testkit.genuine_clis import AGENTS_BIN, claude_options, cli_path

CLAUDE = AGENTS_BIN / "claude"
TURN_TIMEOUT = 45.0

pytestmark = pytest.mark.timeout(150)


def _require_cli() -> None:
    cli_path("claude")


@pytest.fixture
def fake() -> object:
    server = FakeAnthropic(slow_chunks=40, slow_delay=0.25)
    server.start()
    yield server
    server.stop()


@dataclass
class Session:
    adapter: ClaudeAdapter
    workdir: Path
    home: Path
    events: list[StampedEvent] = field(default_factory=list)
    arrived: trio.Event = field(default_factory=trio.Event)

    async def emit(self, stamped: StampedEvent) -> None:
        self.events.append(stamped)
        self.arrived.set()

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

    async def turn(self, run_id: str, text: str) -> StampedEvent:
        """Prompt and wait for the end of that turn (completed or aborted)."""
        await self.adapter.prompt(_prompt(run_id, text, self.workdir))
        return await self.wait_for(
            lambda s: s.run_id == run_id and isinstance(s.event, TurnCompleted | TurnAborted)
        )


def _prompt(run_id: str, text: str, workdir: Path) -> PromptAgent:
    return PromptAgent(run_id=run_id, text=text, agent="claude", workdir=str(workdir))


def _options(fake: FakeAnthropic, home: Path, **overrides: object) -> AgentOptions:
    return claude_options(fake.base_url, home, **overrides)


@asynccontextmanager
async def running_claude(
    tmp_path: Path,
    fake: FakeAnthropic,
    *,
    session_id: str | None = None,
    name: str = "a",
    fork: bool = False,
    **overrides: object,
) -> AsyncIterator[Session]:
    _require_cli()
    home = tmp_path / "home"
    workdir = tmp_path / "work"
    home.mkdir(exist_ok=True)
    workdir.mkdir(exist_ok=True)
    adapter = ClaudeAdapter(_options(fake, home, **overrides))
    session = Session(adapter, workdir, home)
    start = StartAgent(
        agent="claude",
        workdir=str(workdir),
        session_id=session_id,
        fork_of=session_id if fork else None,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(adapter.serve, start, session.emit)
        pids = tree_pids(adapter._proc.pid) if adapter._proc is not None else []
        try:
            yield session
        finally:
            with trio.CancelScope(shield=True), trio.fail_after(30):
                await adapter.stop()
    assert adapter.stopped_clean is True
    assert not [p for p in pids if psutil.pid_exists(p) and _not_zombie(p)]


def _descendant_cmdlines(pid: int) -> list[str]:
    """Command lines of the live descendants (short-lived helpers may vanish mid-look)."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                found.append(" ".join(child.cmdline()))
        except psutil.Error:
            pass
    return found


def _not_zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_text_answer_with_model_and_system_instruction(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    async with running_claude(
        tmp_path, fake, model="claude-fake-1", system_instruction="SPINDLE-SYSTEM-MARK"
    ) as s:
        end = await s.turn("r1", "hello")
        assert s.text_of("r1") == "Hello from fake model."
        deltas = [e for e in s.of_run("r1") if isinstance(e, TextDelta)]
        assert len(deltas) == 4  # streamed, not one whole block
        done = end.event
        assert isinstance(done, TurnCompleted) and not done.is_error
        assert done.session_id and done.session_id == end.session_id
        assert done.cost_usd is not None and done.cost_usd > 0
        assert done.usage is not None and done.usage.output_tokens == 5
        assert done.duration_ms is not None
        started = [e for e in s.of_run("r1") if isinstance(e, SessionStarted)]
        assert started and started[0].session_id == done.session_id
    body = fake.messages_requests()[-1].body
    assert body["model"] == "claude-fake-1"
    assert "SPINDLE-SYSTEM-MARK" in str(body["system"])
    assert s.adapter.statistics().malformed == 0


async def test_an_image_attachment_reaches_the_model(tmp_path: Path, fake: FakeAnthropic) -> None:
    png = bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
        "0000000d49444154789c6360000002000005000157a0cf0a0000000049454e44ae426082"
    )
    async with running_claude(tmp_path, fake) as s:
        (s.workdir / "dot.png").write_bytes(png)
        dot = Attachment(name="dot.png", content_type="image/png", path=str(s.workdir / "dot.png"))
        prompt = _prompt("r1", "what is this", s.workdir).model_copy(update={"attachments": (dot,)})
        await s.adapter.prompt(prompt)
        end = await s.wait_for(lambda e: isinstance(e.event, TurnCompleted | TurnAborted))
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error
    users = [m for m in fake.messages_requests()[-1].body["messages"] if m["role"] == "user"]
    kinds = [b.get("type") for b in users[-1]["content"] if isinstance(b, dict)]
    assert "image" in kinds
    assert any("[Attached file:" in b.get("text", "") for b in users[-1]["content"])


async def test_thinking_is_streamed_apart_from_text(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running_claude(tmp_path, fake) as s:
        await s.turn("r1", "THINKTEST")
        thinking = "".join(e.text for e in s.of_run("r1") if isinstance(e, ThinkingDelta))
        assert thinking == "Let me think."
        assert s.text_of("r1") == "Thought done."


async def test_tool_call_really_runs_in_the_workdir(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running_claude(tmp_path, fake) as s:
        end = await s.turn("r1", "PWDTEST where am I")
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error
        started = [e for e in s.of_run("r1") if isinstance(e, ToolStarted)]
        finished = [e for e in s.of_run("r1") if isinstance(e, ToolFinished)]
        assert [(t.name, t.display_name, t.input_summary) for t in started] == [
            ("Bash", "Bash", "pwd")
        ]
        assert finished[0].tool_id == started[0].tool_id and not finished[0].is_error
        assert finished[0].result.strip() == os.path.realpath(s.workdir)
        assert s.text_of("r1") == f"Tool said: {finished[0].result}"


async def test_second_turn_in_the_same_process(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running_claude(tmp_path, fake) as s:
        first = await s.turn("r1", "hello")
        pid = s.adapter._proc.pid
        # A model change between turns is applied in place (control request set_model).
        switched = _prompt("r2", "TOOLTEST please", s.workdir).model_copy(
            update={"model": "claude-switched-9"}
        )
        await s.adapter.prompt(switched)
        second = await s.wait_for(
            lambda e: e.run_id == "r2" and isinstance(e.event, TurnCompleted | TurnAborted)
        )
        assert isinstance(second.event, TurnCompleted) and not second.event.is_error
        assert s.text_of("r2") == "Tool said: hi"
        assert second.session_id == first.session_id
        assert s.adapter.processes_started == 1 and s.adapter._proc.pid == pid
        # Each run's events carry its own run id: nothing of r2 was stamped r1.
        assert "Tool said" not in s.text_of("r1")
        # The cost of turn 2 is its own, not the process's running total.
        assert second.event.cost_usd == pytest.approx(0.00035)
    models = [r.body["model"] for r in fake.messages_requests()]
    assert models == ["claude-opus-4-8", "claude-switched-9", "claude-switched-9"]


async def test_resume_after_the_process_is_gone(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running_claude(tmp_path, fake) as s:
        first = await s.turn("r1", "hello there")
    session_id = first.session_id
    assert session_id
    convs = list_conversations(str(s.workdir), str(s.home))
    assert [c.session_id for c in convs] == [session_id]
    assert convs[0].title == "hello there"
    async with running_claude(tmp_path, fake, session_id=session_id) as s2:
        end = await s2.turn("r2", "TOOLTEST again")
        assert isinstance(end.event, TurnCompleted) and end.event.session_id == session_id
    # The model saw the first turn again: the history was resumed, not started anew.
    first_request = fake.messages_requests()[-2].body
    history = [user_text(m) for m in first_request["messages"] if m.get("role") == "user"]
    assert any("hello there" in h for h in history)
    assert list_conversations(str(tmp_path / "nowhere"), str(s.home)) == []


async def test_interrupt_mid_stream_then_a_normal_turn(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running_claude(tmp_path, fake) as s:
        await s.adapter.prompt(_prompt("r1", "SLOWTEST", s.workdir))
        await s.wait_for(lambda e: e.run_id == "r1" and "chunk2" in s.text_of("r1"))
        with trio.fail_after(10):
            await s.adapter.interrupt("r1")
            end = await s.wait_for(
                lambda e: e.run_id == "r1" and isinstance(e.event, TurnCompleted | TurnAborted)
            )
        assert isinstance(end.event, TurnAborted) and end.event.reason == "interrupted"
        assert "chunk39" not in s.text_of("r1")
        pid = s.adapter._proc.pid
        after = await s.turn("r2", "hello again")
        assert isinstance(after.event, TurnCompleted) and not after.event.is_error
        assert s.text_of("r2") == "Hello from fake model."
        assert s.adapter._proc.pid == pid and s.adapter.processes_started == 1
        # A late interrupt of the finished run is ignored, not sent.
        await s.adapter.interrupt("r1")


async def test_prompts_written_while_busy_are_stamped_with_their_own_runs(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    fake.slow_chunks = 6
    async with running_claude(tmp_path, fake) as s:

        def ends(run_id: str) -> list[object]:
            return [e for e in s.of_run(run_id) if isinstance(e, TurnCompleted | TurnAborted)]

        # Queued behind a running turn (no interrupt): r1 finishes, then r2 runs.
        await s.adapter.prompt(_prompt("r1", "SLOWTEST", s.workdir))
        await s.wait_for(lambda e: "chunk1" in s.text_of("r1"))
        await s.adapter.prompt(_prompt("r2", "hello", s.workdir))
        # Interrupting a queued prompt ends it when the CLI gets to it, not the one before.
        await s.adapter.prompt(_prompt("r3", "hello", s.workdir))
        await s.adapter.interrupt("r3")
        await s.adapter.prompt(_prompt("r4", "THINKTEST", s.workdir))
        await s.wait_for(lambda e: e.run_id == "r4" and isinstance(e.event, TurnCompleted))
        assert s.text_of("r1") == "".join(f"chunk{i} " for i in range(6))
        assert s.text_of("r2") == "Hello from fake model."
        assert s.text_of("r4") == "Thought done."
        assert [type(e) for e in ends("r1") + ends("r2") + ends("r3")] == [
            TurnCompleted,
            TurnCompleted,
            TurnAborted,
        ]
        # An interrupt followed at once by the next prompt: the aborted result is r5's.
        fake.slow_chunks = 40
        await s.adapter.prompt(_prompt("r5", "SLOWTEST", s.workdir))
        await s.wait_for(lambda e: "chunk1" in s.text_of("r5"))
        await s.adapter.interrupt("r5")
        await s.adapter.prompt(_prompt("r6", "hello", s.workdir))
        await s.wait_for(lambda e: e.run_id == "r6" and isinstance(e.event, TurnCompleted))
        assert [type(e) for e in ends("r5") + ends("r6")] == [TurnAborted, TurnCompleted]
        assert s.text_of("r6") == "Hello from fake model."
        assert s.adapter.processes_started == 1 and not s.adapter.turn_open


async def test_interrupt_while_a_permission_is_pending(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running_claude(tmp_path, fake) as s:
        await s.adapter.prompt(_prompt("r1", "TOUCHTEST", s.workdir))
        asked = await s.wait_for(lambda e: isinstance(e.event, PermissionRequested))
        await s.adapter.interrupt("r1")
        end = await s.wait_for(
            lambda e: e.run_id == "r1" and isinstance(e.event, TurnCompleted | TurnAborted)
        )
        assert isinstance(end.event, TurnAborted) and end.event.reason == "interrupted"
        assert s.adapter.parser.pending == {}  # the CLI withdrew its request
        # The core refuses a blocked request when it interrupts: a late answer is harmless.
        await s.adapter.answer_permission(asked.event.request_id, False)
        after = await s.turn("r2", "hello")
        assert (
            isinstance(after.event, TurnCompleted) and s.text_of("r2") == "Hello from fake model."
        )
        assert not (s.workdir / "touched.txt").exists()


async def test_interrupt_mid_tool_kills_the_tool(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running_claude(tmp_path, fake) as s:
        await s.adapter.prompt(_prompt("r1", "SLEEPTEST", s.workdir))
        await s.wait_for(lambda e: isinstance(e.event, ToolStarted))
        with trio.fail_after(15):
            while not any("sleep 30" in c for c in _descendant_cmdlines(s.adapter._proc.pid)):
                await trio.sleep(0.05)
        await s.adapter.interrupt("r1")
        end = await s.wait_for(
            lambda e: e.run_id == "r1" and isinstance(e.event, TurnCompleted | TurnAborted)
        )
        assert isinstance(end.event, TurnAborted)
        finished = [e for e in s.of_run("r1") if isinstance(e, ToolFinished)]
        assert len(finished) == 1  # the tool card is closed, not left spinning
        with trio.fail_after(5):
            while any("sleep 30" in c for c in _descendant_cmdlines(s.adapter._proc.pid)):
                await trio.sleep(0.05)
        after = await s.turn("r2", "hello")
        assert s.text_of("r2") == "Hello from fake model."
        assert isinstance(after.event, TurnCompleted)


@pytest.mark.parametrize("allow", [True, False])
async def test_permission_request_answered(
    tmp_path: Path, fake: FakeAnthropic, allow: bool
) -> None:
    async with running_claude(tmp_path, fake) as s:
        await s.adapter.prompt(_prompt("r1", "TOUCHTEST", s.workdir))
        asked = await s.wait_for(lambda e: isinstance(e.event, PermissionRequested))
        assert asked.run_id == "r1"
        assert asked.event.tool == "Bash" and "touch touched.txt" in asked.event.detail
        assert not (s.workdir / "touched.txt").exists()
        await s.adapter.answer_permission(asked.event.request_id, allow)
        end = await s.wait_for(lambda e: isinstance(e.event, TurnCompleted | TurnAborted))
        assert isinstance(end.event, TurnCompleted)
        finished = [e for e in s.of_run("r1") if isinstance(e, ToolFinished)]
        assert len(finished) == 1
        assert finished[0].is_error is (not allow)
        assert (s.workdir / "touched.txt").exists() is allow
        # A second answer to the same request is a no-op (the CLI is not asked twice).
        await s.adapter.answer_permission(asked.event.request_id, allow)


async def test_ask_user_question_becomes_a_question(tmp_path: Path, fake: FakeAnthropic) -> None:
    async with running_claude(tmp_path, fake) as s:
        await s.adapter.prompt(_prompt("r1", "ASKTEST", s.workdir))
        asked = await s.wait_for(lambda e: isinstance(e.event, QuestionAsked))
        assert asked.event.question == ASK_QUESTION
        assert asked.event.options == ("Red", "Blue") and not asked.event.multiple
        await s.adapter.answer_question(asked.event.request_id, "Blue")
        end = await s.wait_for(lambda e: isinstance(e.event, TurnCompleted | TurnAborted))
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error
        finished = [e for e in s.of_run("r1") if isinstance(e, ToolFinished)]
        assert finished and "Blue" in finished[0].result and not finished[0].is_error


async def test_model_server_down_gives_a_clear_error(tmp_path: Path, fake: FakeAnthropic) -> None:
    fake.down()
    async with running_claude(tmp_path, fake) as s:
        with trio.fail_after(40):
            end = await s.turn("r1", "hello")
        assert isinstance(end.event, TurnCompleted) and end.event.is_error
        assert "Unable to connect" in (end.event.error or "")
        assert s.text_of("r1") == ""
        assert any(isinstance(e, AgentError) and e.retryable for e in s.of_run("r1"))


async def test_an_overloaded_model_is_retried(tmp_path: Path, fake: FakeAnthropic) -> None:
    fake.error_replies = [(529, "overloaded_error")]
    async with running_claude(tmp_path, fake) as s:
        end = await s.turn("r1", "hello")
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error
        retries = [e for e in s.of_run("r1") if isinstance(e, AgentError)]
        assert [(e.retryable, "HTTP 529" in e.message) for e in retries] == [(True, True)]
        assert s.text_of("r1") == "Hello from fake model."


async def test_a_rejected_api_key_fails_the_turn_once(tmp_path: Path, fake: FakeAnthropic) -> None:
    fake.error_replies = [(401, "authentication_error")] * 5
    async with running_claude(tmp_path, fake) as s:
        end = await s.turn("r1", "hello")
        assert isinstance(end.event, TurnCompleted) and end.event.is_error
        assert "401" in (end.event.error or "")
        assert s.text_of("r1") == ""  # the error is the turn's, not answer text


async def test_crash_mid_turn_aborts_the_turn(tmp_path: Path, fake: FakeAnthropic) -> None:
    _require_cli()
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    adapter = ClaudeAdapter(_options(fake, tmp_path / "home"))
    session = Session(adapter, tmp_path / "work", tmp_path / "home")
    start = StartAgent(agent="claude", workdir=str(session.workdir))
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(adapter.serve, start, session.emit)
            await adapter.prompt(_prompt("r1", "SLOWTEST", session.workdir))
            await session.wait_for(lambda e: "chunk1" in session.text_of("r1"))
            pids = tree_pids(adapter._proc.pid)
            os.kill(adapter._proc.pid, signal.SIGKILL)
            # serve returns by itself once the process is gone: the nursery closes.
    ends = [e for e in session.of_run("r1") if isinstance(e, TurnCompleted | TurnAborted)]
    assert len(ends) == 1 and isinstance(ends[0], TurnAborted)
    assert ends[0].exit_code == -signal.SIGKILL
    assert "exited" in ends[0].reason
    await adapter.stop()
    assert not [p for p in pids if psutil.pid_exists(p) and _not_zombie(p)]


async def test_per_turn_mode_resumes_one_process_per_turn(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    async with running_claude(tmp_path, fake, per_turn=True) as s:
        first = await s.turn("r1", "hello")
        second = await s.turn("r2", "TOOLTEST")
        assert isinstance(second.event, TurnCompleted) and not second.event.is_error
        assert s.text_of("r1") == "Hello from fake model."
        assert s.text_of("r2") == "Tool said: hi"
        assert s.adapter.processes_started == 2
        assert second.session_id == first.session_id
        # A turn that cannot start (its workdir is gone) fails alone; the next one runs.
        gone = tmp_path / "gone"
        await s.adapter.prompt(_prompt("r3", "hello", gone))
        third = await s.wait_for(lambda e: e.run_id == "r3" and isinstance(e.event, TurnAborted))
        assert "does not exist" in third.event.reason
        fourth = await s.turn("r4", "hello")
        assert isinstance(fourth.event, TurnCompleted) and s.adapter.processes_started == 3


async def test_mcp_server_injected_with_its_token(tmp_path: Path, fake: FakeAnthropic) -> None:
    fake.route("*", "/mcp", lambda req: JSONResponse({"error": "no MCP here"}, 404))
    token = "spindle-secret-token-123"
    server = McpServer(name="process-manager", url=f"{fake.base_url}/mcp", bearer_token=token)
    async with running_claude(tmp_path, fake, mcp_servers=(server,)) as s:
        await s.turn("r1", "hello")
        config_dir = s.adapter.private_dir
        assert config_dir is not None and os.path.exists(config_dir)
        assert f"--mcp-config={config_dir}/mcp.json" in " ".join(
            psutil.Process(s.adapter._proc.pid).cmdline()
        )
        assert token not in " ".join(psutil.Process(s.adapter._proc.pid).cmdline())
    mcp_calls = [r for r in fake.requests if r.path.startswith("/mcp")]
    assert mcp_calls, "the CLI never contacted the injected MCP server"
    auth = {v for r in mcp_calls for k, v in r.headers.items() if k.lower() == "authorization"}
    assert auth == {f"Bearer {token}"}
    assert not os.path.exists(config_dir)  # the private config is gone with the process
    for path in s.home.rglob("*"):  # and the CLI copied the token into no file of its own
        if path.is_file() and path.stat().st_size < 5_000_000:
            assert token not in path.read_text(errors="replace"), path


async def test_a_cli_that_cannot_start_is_a_clear_error(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    _require_cli()
    (tmp_path / "home").mkdir()
    start = StartAgent(agent="claude", workdir=str(tmp_path))
    bad_flag = ClaudeAdapter(_options(fake, tmp_path / "home", extra_args=("--no-such-flag",)))
    with trio.fail_after(30), pytest.raises(AgentStartError, match="no-such-flag"):
        await bad_flag.serve(start, Session(bad_flag, tmp_path, tmp_path).emit)
    assert bad_flag._proc is not None and bad_flag._proc.returncode is not None
    assert bad_flag.processes_started == 1  # not taken for an unknown session: no second try
    missing = ClaudeAdapter(AgentOptions(binary=str(tmp_path / "no-claude")))
    with pytest.raises(AgentStartError, match="not found"):
        await missing.serve(start, Session(missing, tmp_path, tmp_path).emit)


UNKNOWN_SESSION = "11111111-2222-3333-4444-555555555555"


def _notices(s: Session) -> list[StampedEvent]:
    return [e for e in s.events if isinstance(e.event, AgentError) and not e.event.retryable]


def _claude_processes_with(text: str) -> list[int]:
    """Live processes of this test whose command line holds ``text``, each named by the pid
    of its guard (what ``ManagedProcess.pid`` is)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
            if child.status() != psutil.STATUS_ZOMBIE and text in cmdline:
                if "process_guard.py" not in cmdline:
                    found.append(child.ppid())
        except psutil.Error:
            pass
    return found


async def test_resuming_an_unknown_session_starts_a_new_one(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    """``/claude resume <unknown id>``: the CLI exits at start ("No conversation found");
    the adapter gets ready in a new session, tells the thread with the first run, and never
    tries that id again."""
    async with running_claude(tmp_path, fake, session_id=UNKNOWN_SESSION) as s:
        assert s.adapter.processes_started == 2  # the failed --resume, then a new session
        assert s.events == []  # nothing of no run: the core would drop it as stale
        assert _claude_processes_with(UNKNOWN_SESSION) == []  # the failed one is gone
        assert "--resume" not in psutil.Process(s.adapter._proc.pid).cmdline()
        assert _claude_processes_with(str(CLAUDE)) == [s.adapter._proc.pid]
        first = await s.turn("r1", "hello")
        assert isinstance(first.event, TurnCompleted) and not first.event.is_error
        assert s.text_of("r1") == "Hello from fake model."
        [notice] = _notices(s)
        assert notice.run_id == "r1"
        assert UNKNOWN_SESSION in notice.event.message
        assert "started a new session" in notice.event.message
        # Told before the turn's own events, and the new session is the turn's.
        assert s.events.index(notice) == 0
        new_session = first.event.session_id
        assert new_session and new_session != UNKNOWN_SESSION
        started = [e for e in s.of_run("r1") if isinstance(e, SessionStarted)]
        assert [e.session_id for e in started] == [new_session]
        second = await s.turn("r2", "hello again")
        assert isinstance(second.event, TurnCompleted) and second.session_id == new_session
        assert len(_notices(s)) == 1  # told once
        assert s.adapter.processes_started == 2
        assert s.adapter.unknown_sessions == {UNKNOWN_SESSION}
    assert [c.session_id for c in list_conversations(str(s.workdir), str(s.home))] == [new_session]
    assert _claude_processes_with(str(CLAUDE)) == []


async def test_per_turn_mode_resuming_an_unknown_session_starts_a_new_one(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    async with running_claude(tmp_path, fake, session_id=UNKNOWN_SESSION, per_turn=True) as s:
        first = await s.turn("r1", "hello")
        assert isinstance(first.event, TurnCompleted) and not first.event.is_error
        assert s.text_of("r1") == "Hello from fake model."
        assert s.adapter.processes_started == 2  # this turn: the failed --resume, then anew
        [notice] = _notices(s)
        assert notice.run_id == "r1" and UNKNOWN_SESSION in notice.event.message
        assert not [e for e in s.events if e.run_id is None]
        new_session = first.event.session_id
        assert new_session and new_session != UNKNOWN_SESSION
        # The next turn resumes the new session at once, even when the prompt still names
        # the unknown one (the core learns the new id only from this turn's events).
        prompt = _prompt("r2", "TOOLTEST", s.workdir).model_copy(
            update={"session_id": UNKNOWN_SESSION}
        )
        await s.adapter.prompt(prompt)
        second = await s.wait_for(
            lambda e: e.run_id == "r2" and isinstance(e.event, TurnCompleted | TurnAborted)
        )
        assert isinstance(second.event, TurnCompleted) and second.session_id == new_session
        assert s.text_of("r2") == "Tool said: hi"
        assert s.adapter.processes_started == 3
        assert len(_notices(s)) == 1
    history = fake.messages_requests()[-2].body["messages"]
    assert any("hello" in user_text(m) for m in history if m.get("role") == "user")
    assert _claude_processes_with(str(CLAUDE)) == []


async def test_mcp_tool_of_the_real_process_manager(tmp_path: Path, fake: FakeAnthropic) -> None:
    from threadspindle.effects.mcp_manager import serve_process_manager
    from threadspindle.effects.mcp_manager.models import ProcessManagerConfig

    config = ProcessManagerConfig(
        port=0, token="t" * 32, data_dir=tmp_path / "pm", allowed_roots=(tmp_path,)
    )
    async with trio.open_nursery() as nursery:
        manager = await nursery.start(serve_process_manager, config)
        server = process_manager_server(manager, "thread-1", str(tmp_path / "work"))
        async with running_claude(tmp_path, fake, mcp_servers=(server,)) as s:
            await s.adapter.prompt(_prompt("r1", "MCPTEST list_processes", s.workdir))
            asked = await s.wait_for(lambda e: isinstance(e.event, PermissionRequested))
            permission_tool = asked.event.tool
            await s.adapter.answer_permission(asked.event.request_id, True)
            end = await s.wait_for(lambda e: isinstance(e.event, TurnCompleted | TurnAborted))
            assert isinstance(end.event, TurnCompleted) and not end.event.is_error
            started = [e for e in s.of_run("r1") if isinstance(e, ToolStarted)]
            finished = [e for e in s.of_run("r1") if isinstance(e, ToolFinished)]
        nursery.cancel_scope.cancel()
    assert [t.display_name for t in started] == ["Process Manager · List Processes"]
    assert started[0].name == "mcp__process-manager__list_processes"
    assert len(finished) == 1 and not finished[0].is_error
    assert "Process Manager" in permission_tool  # cleaned for display, as the tool card

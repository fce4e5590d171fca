"""The Codex adapter driving the genuine ``codex`` CLI (``codex app-server``, and ``codex exec``
per turn) against the fake OpenAI Responses API on 127.0.0.1.

Each test has its own temp HOME (``CODEX_HOME`` inside it) and workdir; the model provider
is defined on the command line (``-c model_providers.fake=...``), so no user config is read
or written. Teardown stops the adapter and asserts psutil finds no process of its tree.
Several behaviours share one process where a thread would too (turns in a row).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
import trio

from threadspindle.agents.base import AgentOptions, AgentStartError, McpServer, StampedEvent
from threadspindle.agents.codex import CodexAdapter, list_conversations
from threadspindle.effects.process import tree_pids
from threadspindle.runtime.core.agent_events import (
    AgentError,
    PermissionRequested,
    SessionStarted,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent
from threadspindle.testkit.fake_model.base import FakeModelServer, JSONResponse, RecordedRequest
from threadspindle.testkit.fake_model.openai_responses import (
    HELLO,
    OpenAIResponsesFake,
    last_user_text,
)
from threadspindle.testkit.genuine_clis import codex_options

TURN_TIMEOUT = 45.0

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def fake() -> Iterator[OpenAIResponsesFake]:
    server = OpenAIResponsesFake(slow_delay=0.2, slow_chunks=40)
    server.start()
    yield server
    server.stop()


@dataclass
class Session:
    adapter: CodexAdapter
    workdir: Path
    events: list[StampedEvent] = field(default_factory=list)
    answers: dict[str, bool] = field(default_factory=dict)  # tool detail word -> allow

    async def emit(self, stamped: StampedEvent) -> None:
        self.events.append(stamped)

    async def wait_for(
        self, match: Callable[[StampedEvent], bool], timeout: float = TURN_TIMEOUT
    ) -> StampedEvent:
        with trio.fail_after(timeout):
            while True:
                for stamped in self.events:
                    if match(stamped):
                        return stamped
                await trio.sleep(0.01)

    async def turn(self, run_id: str, text: str, timeout: float = TURN_TIMEOUT) -> StampedEvent:
        await self.adapter.prompt(
            PromptAgent(run_id=run_id, text=text, agent="codex", workdir=str(self.workdir))
        )
        return await self.turn_end(run_id, timeout)

    async def turn_end(self, run_id: str, timeout: float = TURN_TIMEOUT) -> StampedEvent:
        return await self.wait_for(
            lambda s: s.run_id == run_id and isinstance(s.event, (TurnCompleted, TurnAborted)),
            timeout,
        )

    def of(self, run_id: str, kind: type) -> list:
        return [s.event for s in self.events if s.run_id == run_id and isinstance(s.event, kind)]

    def text(self, run_id: str) -> str:
        return "".join(e.text for e in self.of(run_id, TextDelta))


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


@asynccontextmanager
async def running(
    options: AgentOptions,
    workdir: Path,
    session_id: str | None = None,
    fork: bool = False,
    **adapter_kw: str,
) -> AsyncIterator[Session]:
    adapter = CodexAdapter(options, **adapter_kw)
    session = Session(adapter, workdir)
    start = StartAgent(
        agent="codex",
        workdir=str(workdir),
        session_id=session_id,
        fork_of=session_id if fork else None,
    )
    seen: list[int] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(adapter.serve, start, session.emit)
        if adapter.pid is not None:
            seen = tree_pids(adapter.pid)
        try:
            yield session
        finally:
            if adapter.pid is not None:
                seen += tree_pids(adapter.pid)
            with trio.CancelScope(shield=True):
                with trio.fail_after(20):
                    await adapter.stop()
                with trio.move_on_after(10) as late:
                    await adapter._gone.wait()
            if late.cancelled_caught:
                nursery.cancel_scope.cancel()
    assert _alive(seen) == [], "a codex process outlived stop()"


# -- long-lived: codex app-server ---------------------------------------------------------


async def test_text_answers_and_a_second_turn_in_the_same_process(
    fake: OpenAIResponsesFake, tmp_path: Path
) -> None:
    opts = codex_options(fake.base_url, tmp_path / "home", system_instruction="Answer tersely.")
    work = tmp_path / "work"
    work.mkdir()
    async with running(opts, work) as s:
        started = await s.wait_for(lambda e: isinstance(e.event, SessionStarted))
        thread_id = started.event.session_id
        assert started.event.model == "gpt-5.5"
        pid = s.adapter.pid
        end = await s.turn("r1", "hello")
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error
        assert end.event.session_id == thread_id and end.session_id == thread_id
        assert end.event.usage is not None and end.event.usage.output_tokens == 5
        assert s.text("r1") == HELLO
        end2 = await s.turn("r2", "hello again")
        assert isinstance(end2.event, TurnCompleted) and s.text("r2") == HELLO
        assert s.adapter.pid == pid  # the same process served both turns
        # every event of a turn carries that turn's run id, none leaks into the other
        assert all(e.run_id in (None, "r1", "r2") for e in s.events)
        assert len(s.of("r1", TurnCompleted)) == 1 and len(s.of("r2", TurnCompleted)) == 1
        assert s.adapter.statistics().malformed == 0
        # the first run is told the session id, so the core stores it whatever the turn does
        assert any(e.run_id == "r1" and isinstance(e.event, SessionStarted) for e in s.events)
        # /model between turns: the next turn/start names the new model
        await s.adapter.prompt(
            PromptAgent(run_id="r3", text="hi", agent="codex", workdir=str(work), model="gpt-5.4")
        )
        end3 = await s.turn_end("r3")
        assert isinstance(end3.event, TurnCompleted) and end3.event.model == "gpt-5.4"
        assert fake.requests[-1].body["model"] == "gpt-5.4"
    # the system instruction went in natively, as a developer message
    body = fake.requests[0].body
    developer = [i for i in body["input"] if i.get("role") == "developer"]
    assert any("Answer tersely." in str(i.get("content")) for i in developer)
    assert [last_user_text(r.body) for r in fake.requests] == ["hello", "hello again", "hi"]
    assert [r.body["model"] for r in fake.requests] == ["gpt-5.5", "gpt-5.5", "gpt-5.4"]


async def test_tool_calls_really_run_in_the_workdir(
    fake: OpenAIResponsesFake, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    opts = codex_options(fake.base_url, tmp_path / "home")
    async with running(opts, work, approval_policy="never") as s:
        end = await s.turn("r1", "TOOLTEST run echo hi")
        assert isinstance(end.event, TurnCompleted)
        (started,) = s.of("r1", ToolStarted)
        (finished,) = s.of("r1", ToolFinished)
        assert started.display_name == "Shell" and started.input_summary == "echo hi"
        assert finished.tool_id == started.tool_id
        assert finished.result == "hi\n" and not finished.is_error
        assert "Output:\nhi" in s.text("r1")
        end = await s.turn("r2", "TOUCHTEST")
        assert isinstance(end.event, TurnCompleted)
        assert (work / "touched.txt").exists()
        assert s.of("r2", PermissionRequested) == []


async def test_permission_answered_no_then_yes(fake: OpenAIResponsesFake, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    opts = codex_options(fake.base_url, tmp_path / "home")
    async with running(opts, work, approval_policy="untrusted") as s:
        await s.adapter.prompt(
            PromptAgent(run_id="r1", text="TOUCHTEST", agent="codex", workdir=str(work))
        )
        ask = await s.wait_for(lambda e: isinstance(e.event, PermissionRequested))
        assert ask.run_id == "r1" and ask.event.tool == "Shell"
        assert "touch touched.txt" in ask.event.detail
        await s.adapter.answer_permission(ask.event.request_id, False)
        end = await s.turn_end("r1")
        assert isinstance(end.event, TurnCompleted)  # decline: the model carries on
        (finished,) = s.of("r1", ToolFinished)
        assert finished.is_error
        assert not (work / "touched.txt").exists()
        assert "rejected" in s.text("r1")

        await s.adapter.prompt(
            PromptAgent(run_id="r2", text="TOUCHTEST", agent="codex", workdir=str(work))
        )
        ask2 = await s.wait_for(
            lambda e: e.run_id == "r2" and isinstance(e.event, PermissionRequested)
        )
        assert ask2.event.request_id != ask.event.request_id
        await s.adapter.answer_permission(ask2.event.request_id, True)
        end2 = await s.turn_end("r2")
        assert isinstance(end2.event, TurnCompleted)
        assert (work / "touched.txt").exists()
        (finished2,) = s.of("r2", ToolFinished)
        assert not finished2.is_error


async def test_interrupt_mid_stream_then_a_normal_turn(
    fake: OpenAIResponsesFake, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    opts = codex_options(fake.base_url, tmp_path / "home")
    async with running(opts, work) as s:
        pid = s.adapter.pid
        await s.adapter.prompt(
            PromptAgent(run_id="r1", text="SLOWTEST", agent="codex", workdir=str(work))
        )
        with trio.fail_after(TURN_TIMEOUT):
            while len(s.of("r1", TextDelta)) < 3:
                await trio.sleep(0.01)
        t0 = time.monotonic()
        await s.adapter.interrupt("r1")
        end = await s.turn_end("r1", timeout=15)
        took = time.monotonic() - t0
        assert end.event == TurnAborted(reason="interrupted")
        assert took < 5.0, f"interrupt took {took:.2f}s"  # ~20 ms when the machine is idle
        assert len(s.of("r1", TextDelta)) < 40  # the stream was cut, not finished
        end2 = await s.turn("r2", "hello after interrupt")
        assert isinstance(end2.event, TurnCompleted) and s.text("r2") == HELLO
        assert s.adapter.pid == pid  # interrupted in-band: the process lived on
        assert psutil.pid_exists(pid)


async def test_resume_after_the_process_is_gone(fake: OpenAIResponsesFake, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    opts = codex_options(fake.base_url, tmp_path / "home")
    async with running(opts, work) as s:
        await s.turn("r1", "remember the word banana")
        thread_id = s.adapter.session_id
    assert thread_id is not None  # (running() checked that the first process is gone)
    async with running(opts, work, session_id=thread_id) as s2:
        started = await s2.wait_for(lambda e: isinstance(e.event, SessionStarted))
        assert started.event.session_id == thread_id
        end = await s2.turn("r2", "what was the word?")
        assert isinstance(end.event, TurnCompleted) and end.event.session_id == thread_id
    # the resumed turn sent the earlier history to the model
    history = str(fake.requests[-1].body["input"])
    assert "remember the word banana" in history and "what was the word?" in history
    listed = list_conversations(str(work), opts.home)
    assert [c.session_id for c in listed] == [thread_id]
    assert listed[0].title == "remember the word banana"


async def test_model_server_down_fails_the_turn_quickly(tmp_path: Path) -> None:
    dead = OpenAIResponsesFake()
    dead.start()
    base_url = dead.base_url
    dead.down()  # nothing listens on that port any more
    work = tmp_path / "work"
    work.mkdir()
    opts = codex_options(base_url, tmp_path / "home")
    async with running(opts, work) as s:
        t0 = time.monotonic()
        end = await s.turn("r1", "hello", timeout=30)
        took = time.monotonic() - t0
        assert isinstance(end.event, TurnCompleted) and end.event.is_error
        assert end.event.error and "Connection failed" in end.event.error
        # told once (as the turn's error), not a second time as a separate notice
        assert [e for e in s.of("r1", AgentError) if not e.retryable] == []
        assert took < 20, f"a dead model server took {took:.1f}s to fail the turn"


@pytest.mark.parametrize("per_turn", [False, True], ids=["app-server", "exec"])
async def test_retries_of_the_builtin_provider_are_capped_at_max_retries(
    tmp_path: Path, per_turn: bool
) -> None:
    """The built-in ``openai`` provider's retry counts cannot be configured (codex refuses
    ``model_providers.openai.*``) and retry for ~30 s: the adapter numbers the retries and
    stops the turn after ``max_retries``, which then fails saying why."""
    dead = OpenAIResponsesFake()
    dead.start()
    base_url = dead.base_url
    dead.down()
    work = tmp_path / "work"
    work.mkdir()
    custom = codex_options(base_url, tmp_path / "home", per_turn=per_turn)
    pairs = zip(custom.extra_args[::2], custom.extra_args[1::2], strict=True)  # "-c", value
    builtin = [x for flag, value in pairs if "model_provider" not in value for x in (flag, value)]
    opts = custom.model_copy(
        update={
            "extra_args": (*builtin, "-c", f'openai_base_url="{base_url}/v1"'),
            "env": (("OPENAI_API_KEY", "sk-fake"),),
            "max_retries": 1,
        }
    )
    async with running(opts, work) as s:
        t0 = time.monotonic()
        end = await s.turn("r1", "hello", timeout=60)
        took = time.monotonic() - t0
        retries = [e.event for e in s.events if isinstance(e.event, AgentError)]
        assert [(e.retryable, e.attempt, e.max_retries) for e in retries] == [(True, 1, 1)]
        assert isinstance(end.event, TurnCompleted) and end.event.is_error
        assert "gave up after 1 retries" in (end.event.error or "")
        assert took < 20, f"{took:.1f}s: the retries were not capped"


async def test_a_crash_mid_turn_aborts_the_turn(fake: OpenAIResponsesFake, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    opts = codex_options(fake.base_url, tmp_path / "home")
    async with running(opts, work) as s:
        await s.adapter.prompt(
            PromptAgent(run_id="r1", text="CRASHTEST", agent="codex", workdir=str(work))
        )
        await s.wait_for(lambda e: e.run_id == "r1" and isinstance(e.event, TextDelta))
        assert s.adapter.pid is not None
        for pid in reversed(tree_pids(s.adapter.pid)):  # the native binary, then its launcher
            with contextlib.suppress(ProcessLookupError):  # a short-lived helper may be gone
                os.kill(pid, signal.SIGKILL)
        end = await s.turn_end("r1", timeout=10)
        assert isinstance(end.event, TurnAborted)
        assert end.event.reason == "codex exited" and end.event.exit_code not in (None, 0)
        with trio.fail_after(10):
            await s.adapter._gone.wait()  # serve() returns: the listener restarts it
        # a prompt to the dead process ends at once instead of hanging
        await s.adapter.prompt(
            PromptAgent(run_id="r2", text="hello", agent="codex", workdir=str(work))
        )
        late = await s.turn_end("r2", timeout=5)
        assert isinstance(late.event, TurnAborted)


# -- fall-back: codex exec --json per turn -------------------------------------------------


async def test_per_turn_mode_resumes_and_interrupts(
    fake: OpenAIResponsesFake, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    opts = codex_options(
        fake.base_url, tmp_path / "home", per_turn=True, system_instruction="Be kind."
    )
    async with running(opts, work) as s:
        end = await s.turn("r1", "hello")
        assert isinstance(end.event, TurnCompleted) and s.text("r1") == HELLO
        assert end.event.duration_ms is not None
        thread_id = end.event.session_id
        assert thread_id
        end2 = await s.turn("r2", "TOOLTEST")
        assert isinstance(end2.event, TurnCompleted) and end2.event.session_id == thread_id
        assert s.of("r2", ToolFinished)[0].result == "hi\n"
        await s.adapter.prompt(
            PromptAgent(run_id="r3", text="SLOWTEST", agent="codex", workdir=str(work))
        )
        await s.wait_for(lambda e: e.run_id == "r3" and isinstance(e.event, SessionStarted))
        await trio.sleep(0.5)
        await s.adapter.interrupt("r3")
        end3 = await s.turn_end("r3", timeout=10)
        assert isinstance(end3.event, TurnAborted) and end3.event.reason == "interrupted"
        # a prompt waiting behind a running turn can be interrupted before it ever runs
        for run_id, text in (("r4", "SLOWTEST"), ("r5", "never sent")):
            await s.adapter.prompt(
                PromptAgent(run_id=run_id, text=text, agent="codex", workdir=str(work))
            )
        await s.adapter.interrupt("r5")
        await s.adapter.interrupt("r4")
        end4, end5 = await s.turn_end("r4", timeout=10), await s.turn_end("r5", timeout=10)
        assert end4.event.reason == end5.event.reason == "interrupted"
    developer = [i for i in fake.requests[0].body["input"] if i.get("role") == "developer"]
    assert any("Be kind." in str(i.get("content")) for i in developer)
    assert "hello" in str(fake.requests[-1].body["input"])  # the resumed history
    assert not any("never sent" in str(r.body) for r in fake.requests)


# -- MCP injection ----------------------------------------------------------------------------


def _mcp_reply(req: RecordedRequest) -> JSONResponse:
    """Just enough of an MCP streamable-HTTP server for codex's start-up handshake."""
    body = req.body if isinstance(req.body, dict) else {}
    method, rpc_id = body.get("method"), body.get("id")
    if rpc_id is None:
        return JSONResponse(None, 202)  # a notification
    if method == "initialize":
        result = {
            "protocolVersion": body.get("params", {}).get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "probe", "version": "1"},
        }
    elif method == "tools/list":
        tool = {"name": "restart_process", "inputSchema": {"type": "object", "properties": {}}}
        result = {"tools": [tool]}
    else:
        return JSONResponse({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32601}})
    return JSONResponse({"jsonrpc": "2.0", "id": rpc_id, "result": result})


def _cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:  # a short-lived helper that is already gone (or a zombie)
        return ""


async def test_mcp_servers_are_injected_with_their_token(
    fake: OpenAIResponsesFake, tmp_path: Path
) -> None:
    mcp = FakeModelServer()
    mcp.route("*", "/mcp", _mcp_reply)
    mcp.start()
    dead = FakeModelServer()
    dead.start()
    dead_url = dead.base_url + "/mcp"
    dead.down()
    work = tmp_path / "work"
    work.mkdir()
    servers = (
        McpServer(name="process-manager", url=mcp.base_url + "/mcp", bearer_token="s3cret"),
        McpServer(name="gone", url=dead_url),
    )
    opts = codex_options(fake.base_url, tmp_path / "home").model_copy(
        update={"mcp_servers": servers}
    )
    try:
        async with running(opts, work) as s:
            assert s.adapter.pid is not None
            cmdlines = [_cmdline(p) for p in tree_pids(s.adapter.pid)]
            assert cmdlines[0] and all("s3cret" not in c for c in cmdlines)  # not on any argv
            end = await s.turn("r1", "hello")
            assert isinstance(end.event, TurnCompleted)
            failed = await s.wait_for(
                lambda e: isinstance(e.event, AgentError) and "gone" in e.event.message
            )
            assert "failed to start" in failed.event.message
    finally:
        mcp.stop()
    methods = [r.body.get("method") for r in mcp.requests if isinstance(r.body, dict)]
    assert "initialize" in methods and "tools/list" in methods
    auth = [{k.lower(): v for k, v in r.headers.items()}.get("authorization") for r in mcp.requests]
    assert auth and all(a == "Bearer s3cret" for a in auth), auth
    # The token lives in the app-server's environment only (one process per thread): no file
    # of the home, where every thread's codex keeps its sessions, holds it.
    for path in (tmp_path / "home").rglob("*"):
        if path.is_file() and path.stat().st_size < 5_000_000:
            assert b"s3cret" not in path.read_bytes(), path


# -- start-up failures ----------------------------------------------------------------------


async def _start_error(adapter: CodexAdapter, workdir: Path) -> AgentStartError:
    """The error ``serve`` raised instead of getting ready (the listener sees it this way)."""
    caught: list[BaseException] = []
    try:
        async with trio.open_nursery() as nursery:
            start = StartAgent(agent="codex", workdir=str(workdir))
            await nursery.start(adapter.serve, start, _ignore)
            nursery.cancel_scope.cancel()
    except* AgentStartError as group:
        caught.extend(group.exceptions)
    assert len(caught) == 1, "serve() got ready although it should have failed"
    assert isinstance(caught[0], AgentStartError)
    return caught[0]


async def test_a_failed_start_raises_with_the_reason(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    missing = AgentOptions(binary=str(tmp_path / "no-such-codex"), home=str(tmp_path / "h1"))
    error = await _start_error(CodexAdapter(missing), work)
    assert "cannot start codex" in str(error) and "no-such-codex" in str(error)
    # a config codex rejects: the app-server exits before the handshake
    bad = codex_options("http://127.0.0.1:9/v1", tmp_path / "h2").model_copy(
        update={"extra_args": ("-c", "model_provider=nowhere")}
    )
    adapter = CodexAdapter(bad)
    error = await _start_error(adapter, work)
    assert "did not start" in str(error)
    assert "nowhere" in str(error)  # codex's own complaint, from its stderr
    assert adapter.pid is not None and _alive(tree_pids(adapter.pid)) == []


async def _ignore(stamped: StampedEvent) -> None:
    pass


async def test_stop_mid_turn_ends_the_turn_and_the_tree(
    fake: OpenAIResponsesFake, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    opts = codex_options(fake.base_url, tmp_path / "home")
    async with running(opts, work) as s:
        await s.adapter.prompt(
            PromptAgent(run_id="r1", text="SLOWTEST", agent="codex", workdir=str(work))
        )
        await s.wait_for(lambda e: e.run_id == "r1" and isinstance(e.event, TextDelta))
        assert s.adapter.pid is not None
        tree = tree_pids(s.adapter.pid)
        t0 = time.monotonic()
        with trio.fail_after(15):
            await s.adapter.stop()
        assert time.monotonic() - t0 < 10  # interrupt in-band, close stdin: no SIGKILL wait
        end = await s.turn_end("r1", timeout=5)
        assert isinstance(end.event, TurnAborted)
        assert _alive(tree) == []


async def test_file_edit_approvals(fake: OpenAIResponsesFake, tmp_path: Path) -> None:
    """``apply_patch`` asks through ``item/fileChange/requestApproval``: no, then yes."""
    work = tmp_path / "work"
    work.mkdir()
    opts = codex_options(fake.base_url, tmp_path / "home")
    async with running(opts, work, approval_policy="untrusted") as s:
        for run_id, allow in (("r1", False), ("r2", True)):
            await s.adapter.prompt(
                PromptAgent(run_id=run_id, text="PATCHTEST", agent="codex", workdir=str(work))
            )
            ask = await s.wait_for(
                lambda e, r=run_id: e.run_id == r and isinstance(e.event, PermissionRequested)
            )
            assert ask.event.tool == "Edit" and ask.event.detail.endswith("patched.txt")
            (started,) = s.of(run_id, ToolStarted)
            assert started.display_name == "Edit"
            await s.adapter.answer_permission(ask.event.request_id, allow)
            end = await s.turn_end(run_id)
            assert isinstance(end.event, TurnCompleted)
            (finished,) = s.of(run_id, ToolFinished)
            assert finished.tool_id == started.tool_id and finished.is_error is not allow
            assert (work / "patched.txt").exists() is allow
    assert (work / "patched.txt").read_text() == "patched by the fake\n"


async def test_an_unknown_session_is_reported_and_a_new_one_started(
    fake: OpenAIResponsesFake, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    opts = codex_options(fake.base_url, tmp_path / "home")
    gone = "01a20000-0000-7000-8000-000000000000"
    async with running(opts, work, session_id=gone) as s:
        assert s.adapter.session_id not in (None, gone)
        end = await s.turn("r1", "hello")
        assert isinstance(end.event, TurnCompleted) and end.event.session_id != gone
        (error,) = s.of("r1", AgentError)  # told with the first run, not dropped before it
        assert gone in error.message and "could not resume" in error.message
        started = s.of("r1", SessionStarted)
        assert started and started[0].session_id == s.adapter.session_id

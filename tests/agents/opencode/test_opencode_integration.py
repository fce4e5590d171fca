"""The opencode adapter driving the genuine ``opencode`` CLI (``opencode serve``, and
``opencode run --format json`` per turn) against the fake Chat Completions API on 127.0.0.1.

Each test has its own temp HOME (XDG dirs inside it, where the fake provider's config is
written) and workdir; all of opencode's network features are switched off by environment.
Several behaviours share one server where threads would too (turns in a row, two threads of
one directory). Teardown stops the adapters and asserts psutil finds no process left.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest
import trio

from threadspindle.agents.base import AgentOptions, McpServer, StampedEvent
from threadspindle.agents.opencode import OpencodeAdapter, list_conversations
from threadspindle.agents.opencode.launch import mcp_registrations
from threadspindle.agents.opencode.server import live_servers
from threadspindle.effects.process import ManagedProcess, tree_pids
from threadspindle.runtime.core.agent_events import (
    AgentError,
    PermissionRequested,
    QuestionAsked,
    SessionStarted,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent
from threadspindle.testkit import genuine_clis
from threadspindle.testkit.fake_model.base import (
    FakeModelServer,
    JSONResponse,
    RecordedRequest,
    SSEEvent,
)
from threadspindle.testkit.fake_model.openai_chat import (
    HELLO,
    OpenAIChatFake,
    last_user_text,
    tool_names,
)
from threadspindle.testkit.late_reader import lines_after_exit

TURN_TIMEOUT = 45.0
pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def fake() -> Iterator[OpenAIChatFake]:
    server = OpenAIChatFake(slow_delay=0.2, slow_chunks=40)
    server.start()
    yield server
    server.stop()


def opencode_options(fake: OpenAIChatFake, home: Path, *, per_turn: bool = False) -> AgentOptions:
    """A private HOME whose opencode config names the fake as its only provider."""
    return genuine_clis.opencode_options(fake.base_url, home, per_turn=per_turn)


@dataclass
class Thread:
    """One thread's view: the adapter and every event it emitted, in order."""

    adapter: OpencodeAdapter
    workdir: str
    events: list[StampedEvent] = field(default_factory=list)
    runs: int = 0

    async def emit(self, event: StampedEvent) -> None:
        self.events.append(event)

    async def wait_for(
        self,
        match: Callable[[StampedEvent], bool],
        *,
        after: int = 0,
        timeout: float = TURN_TIMEOUT,
    ) -> StampedEvent:
        with trio.fail_after(timeout):
            while True:
                for event in self.events[after:]:
                    if match(event):
                        return event
                await trio.sleep(0.02)

    async def turn(self, text: str, *, timeout: float = TURN_TIMEOUT) -> list[StampedEvent]:
        """Prompt and wait for the turn's end; the events of that run."""
        run_id = await self.prompt(text)
        await self.wait_for(lambda e: e.run_id == run_id and _ends_turn(e), timeout=timeout)
        return [e for e in self.events if e.run_id == run_id]

    async def prompt(self, text: str) -> str:
        self.runs += 1
        run_id = f"r{self.runs}"
        await self.adapter.prompt(
            PromptAgent(run_id=run_id, text=text, agent="opencode", workdir=self.workdir)
        )
        return run_id


def _ends_turn(event: StampedEvent) -> bool:
    return isinstance(event.event, TurnCompleted | TurnAborted)


def _text(events: list[StampedEvent]) -> str:
    return "".join(e.event.text for e in events if isinstance(e.event, TextDelta))


def _of(events: list[StampedEvent], kind: type) -> list:
    return [e.event for e in events if isinstance(e.event, kind)]


@asynccontextmanager
async def running(
    options: AgentOptions,
    workdir: Path,
    session_id: str | None = None,
    fork: bool = False,
    **kwargs: object,
) -> AsyncIterator[Thread]:
    adapter = OpencodeAdapter(options, **kwargs)  # type: ignore[arg-type]
    thread = Thread(adapter, str(workdir))
    start = StartAgent(
        agent="opencode",
        workdir=str(workdir),
        session_id=session_id,
        fork_of=session_id if fork else None,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(adapter.serve, start, thread.emit)
        try:
            yield thread
        finally:
            with trio.CancelScope(shield=True):
                await adapter.stop()
            nursery.cancel_scope.cancel()


def _assert_gone(pids: list[int]) -> None:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    assert not alive, f"processes left behind: {alive}"


async def test_long_lived_turns_tools_interrupt_and_shared_server(
    fake: OpenAIChatFake, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    options = opencode_options(fake, tmp_path / "home")
    async with running(options, work) as thread:
        server = thread.adapter.server
        assert server is not None and server.process is not None
        pid = server.process.pid
        started = _of(thread.events, SessionStarted)
        assert started and started[0].session_id.startswith("ses_")
        session_id = started[0].session_id

        # The server is password-protected: without the password it answers 401.
        async with httpx.AsyncClient() as anonymous:
            assert (await anonymous.get(f"{server.base_url}/session")).status_code == 401

        # 1. a text answer, streamed as deltas, with the CLI's own completion.
        first = await thread.turn("hello")
        assert _text(first) == HELLO
        done = _of(first, TurnCompleted)[-1]
        assert done.session_id == session_id and not done.is_error
        assert done.model == "fake/fake-model"
        assert done.usage is not None and done.usage.input_tokens == 10
        assert all(e.session_id == session_id for e in first)

        # 2. a tool call that really runs in the workdir, in the same process.
        tool_turn = await thread.turn("TOOLTEST run echo hi")
        started_tools = _of(tool_turn, ToolStarted)
        finished_tools = _of(tool_turn, ToolFinished)
        assert [t.name for t in started_tools] == ["bash"]
        assert started_tools[0].input_summary == "echo hi"
        assert finished_tools[0].result == "hi\n" and not finished_tools[0].is_error
        assert _text(tool_turn) == "Tool said: hi"
        assert server.process.pid == pid  # second turn: same process

        # 3. an interrupt in the middle of a slow stream, then a normal turn.
        slow_run = await thread.prompt("SLOWTEST")
        await thread.wait_for(lambda e: e.run_id == slow_run and isinstance(e.event, TextDelta))
        t0 = time.monotonic()
        await thread.adapter.interrupt(slow_run)
        end = await thread.wait_for(lambda e: e.run_id == slow_run and _ends_turn(e), timeout=10)
        assert isinstance(end.event, TurnAborted) and end.event.reason == "interrupted"
        assert time.monotonic() - t0 < 5.0
        slow_text = _text([e for e in thread.events if e.run_id == slow_run])
        assert slow_text.startswith("chunk0 ") and "chunk39" not in slow_text
        after = await thread.turn("hello after abort")
        assert _text(after) == HELLO and _of(after, TurnCompleted)
        assert server.process.pid == pid

        # A prompt while a turn runs (no interrupt asked): the running turn ends first.
        busy_run = await thread.prompt("SLOWTEST")
        await thread.wait_for(lambda e: e.run_id == busy_run and isinstance(e.event, TextDelta))
        next_turn = await thread.turn("hello while busy")
        ended = [e.event for e in thread.events if e.run_id == busy_run and _ends_turn(e)]
        assert len(ended) == 1 and isinstance(ended[0], TurnAborted)
        assert _text(next_turn) == HELLO and isinstance(next_turn[-1].event, TurnCompleted)

        # 4. the agent asks a question: answered, then (a second time) dismissed.
        run_q = await thread.prompt("QUESTIONTEST pick one")
        asked_q = await thread.wait_for(
            lambda e: e.run_id == run_q and isinstance(e.event, QuestionAsked)
        )
        assert asked_q.event.question == "Which color?"
        assert asked_q.event.options == ("Red", "Blue")
        await thread.adapter.answer_question(asked_q.event.request_id, "Blue")
        await thread.wait_for(lambda e: e.run_id == run_q and _ends_turn(e))
        answered = [e for e in thread.events if e.run_id == run_q]
        assert "Blue" in _of(answered, ToolFinished)[0].result
        assert "Blue" in _text(answered)
        run_q2 = await thread.prompt("QUESTIONTEST again")
        asked_q = await thread.wait_for(
            lambda e: e.run_id == run_q2 and isinstance(e.event, QuestionAsked)
        )
        await thread.adapter.answer_question(asked_q.event.request_id, None)
        end_q2 = await thread.wait_for(lambda e: e.run_id == run_q2 and _ends_turn(e))
        dismissed = [e for e in thread.events if e.run_id == run_q2]
        assert _of(dismissed, ToolFinished)[0].is_error
        assert isinstance(end_q2.event, TurnCompleted | TurnAborted)

        # 5. a second thread in the same directory shares the server, on its own session.
        other_options = opencode_options(fake, tmp_path / "home")
        async with running(other_options, work) as other:
            assert other.adapter.server is server and server.refs == 2
            assert other.adapter.session_id != session_id
            mine = len(thread.events)
            theirs = await other.turn("hello from the other thread")
            assert _text(theirs) == HELLO
            assert all(e.session_id == other.adapter.session_id for e in theirs)
            assert not thread.events[mine:]  # the first thread heard nothing of it
        assert server.refs == 1 and server.alive

        pids = tree_pids(pid)
    _assert_gone(pids)
    assert not live_servers()
    stats = thread.adapter.statistics()
    assert stats.malformed == 0 and stats.skipped > 0 and stats.events > 0


async def test_permission_yes_and_no_then_the_model_server_goes_down(
    fake: OpenAIChatFake, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    options = opencode_options(fake, tmp_path / "home")
    async with running(options, work, permission="ask", max_model_retries=0) as thread:
        run_yes = await thread.prompt("TOUCHTEST")
        asked = await thread.wait_for(
            lambda e: e.run_id == run_yes and isinstance(e.event, PermissionRequested)
        )
        assert asked.event.tool == "bash" and "touch touched.txt" in asked.event.detail
        assert not (work / "touched.txt").exists()
        await thread.adapter.answer_permission(asked.event.request_id, True)
        await thread.wait_for(lambda e: e.run_id == run_yes and _ends_turn(e))
        yes_events = [e for e in thread.events if e.run_id == run_yes]
        assert (work / "touched.txt").exists()
        assert _of(yes_events, ToolFinished)[0].is_error is False
        assert isinstance(yes_events[-1].event, TurnCompleted)

        (work / "touched.txt").unlink()
        run_no = await thread.prompt("TOUCHTEST again")
        asked = await thread.wait_for(
            lambda e: e.run_id == run_no and isinstance(e.event, PermissionRequested)
        )
        await thread.adapter.answer_permission(asked.event.request_id, False)
        await thread.wait_for(lambda e: e.run_id == run_no and _ends_turn(e))
        no_events = [e for e in thread.events if e.run_id == run_no]
        rejected = _of(no_events, ToolFinished)
        assert rejected and rejected[0].is_error and "rejected" in rejected[0].result
        assert not (work / "touched.txt").exists()
        assert isinstance(no_events[-1].event, TurnCompleted)
        # A late answer to a request that is no longer pending is not an error.
        await thread.adapter.answer_permission(asked.event.request_id, True)

        # The model server goes away: opencode would retry for a minute in silence; the
        # turn ends with a clear error instead, and the server stays usable.
        fake.down()
        thread.adapter.max_model_retries = 1  # the cap ([agents.opencode] max_retries)
        t0 = time.monotonic()
        events = await thread.turn("hello while the model is down", timeout=30)
        elapsed = time.monotonic() - t0
        errors = _of(events, AgentError)
        # The one retry allowed is announced (which, of how many); the next one is not
        # made: the turn is stopped instead.
        assert [(e.attempt, e.max_retries) for e in errors if e.retryable] == [(1, 1)]
        assert any(not e.retryable for e in errors)
        end = events[-1].event
        assert isinstance(end, TurnCompleted) and end.is_error
        assert end.error is not None and "Unable to connect" in end.error, end.error
        assert elapsed < 20.0, f"took {elapsed:.1f} s"
        assert thread.adapter.server is not None and thread.adapter.server.alive


async def test_server_killed_mid_turn_then_the_session_resumes(
    fake: OpenAIChatFake, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    options = opencode_options(fake, tmp_path / "home")
    adapter = OpencodeAdapter(options)
    thread = Thread(adapter, str(work))
    start = StartAgent(agent="opencode", workdir=str(work))
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            await nursery.start(adapter.serve, start, thread.emit)
            server = adapter.server
            assert server is not None and server.process is not None
            await thread.turn("remember the word PELICAN")
            session_id = adapter.session_id
            pids = tree_pids(server.process.pid)
            run_id = await thread.prompt("CRASHTEST stream slowly")
            await thread.wait_for(lambda e: e.run_id == run_id and isinstance(e.event, TextDelta))
            # The server itself crashes: SIGKILL to its process group (the command's own,
            # under the guard, which then reports the exit).
            [command] = psutil.Process(server.process.pid).children()
            os.killpg(command.pid, signal.SIGKILL)
            end = await thread.wait_for(lambda e: e.run_id == run_id and _ends_turn(e), timeout=15)
            # serve() returns on its own once the process is gone (the listener restarts it).
    assert isinstance(end.event, TurnAborted)
    assert end.event.exit_code == -signal.SIGKILL
    assert "exited" in end.event.reason
    _assert_gone(pids)
    assert not live_servers()
    assert session_id is not None

    # The conversation list reads opencode's database without a server.
    listed = list_conversations(str(work), home=str(tmp_path / "home"))
    assert [c.session_id for c in listed] == [session_id]

    # Resume after the process is gone: a new server continues the session with its history.
    async with running(options, work, session_id=session_id) as again:
        assert again.adapter.session_id == session_id
        assert again.adapter.server is not None and again.adapter.server.process is not None
        assert again.adapter.server.process.pid not in pids
        events = await again.turn("what was the word?")
        assert _text(events) == HELLO
        assert _of(events, TurnCompleted)[-1].session_id == session_id
        history = json.dumps(fake.agent_requests()[-1].body)
        assert "PELICAN" in history and last_user_text(fake.agent_requests()[-1].body) == (
            "what was the word?"
        )
        # stop() in the middle of a turn: in-band abort first, then the server goes.
        busy_run = await again.prompt("SLOWTEST")
        await again.wait_for(lambda e: e.run_id == busy_run and isinstance(e.event, TextDelta))
        second_pids = tree_pids(again.adapter.server.process.pid)
    stopped = [e.event for e in again.events if e.run_id == busy_run and _ends_turn(e)]
    assert len(stopped) == 1 and isinstance(stopped[0], TurnAborted)
    assert stopped[0].reason == "interrupted"
    _assert_gone(second_pids)


async def test_per_turn_fallback_mcp_tool_then_a_resumed_turn_interrupted(
    fake: OpenAIChatFake, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    mcp = FakeModelServer()
    mcp.route("*", "/mcp", _mcp_reply)
    mcp.start()
    options = opencode_options(fake, tmp_path / "home", per_turn=True).model_copy(
        update={"mcp_servers": (McpServer(name="probe", url=mcp.base_url + "/mcp"),)}
    )
    async with running(options, work) as thread:
        # The MCP server reaches each `opencode run` through the same private config.
        first = await thread.turn("MCPTEST restart it")
        mcp.stop()
        assert "restarted web" in _of(first, ToolFinished)[0].result
        assert _text(first) == "Tool said: restarted web"
        session_id = _of(first, SessionStarted)[0].session_id
        assert _of(first, TurnCompleted)[-1].session_id == session_id
        pid_first = {e.event.session_id for e in first if isinstance(e.event, SessionStarted)}

        slow = await thread.prompt("SLOWTEST")
        started = await thread.wait_for(
            lambda e: e.run_id == slow and isinstance(e.event, SessionStarted), timeout=60
        )
        assert {started.event.session_id} == pid_first  # resumed with -s
        proc = thread.adapter._turn_proc
        assert proc is not None
        pids = tree_pids(proc.pid)
        await thread.adapter.interrupt(slow)
        end = await thread.wait_for(lambda e: e.run_id == slow and _ends_turn(e), timeout=30)
        assert isinstance(end.event, TurnAborted) and end.event.reason == "interrupted"
        assert end.event.exit_code is not None and end.event.exit_code != 0
        assert "chunk39" not in _text([e for e in thread.events if e.run_id == slow])
        _assert_gone(pids)


async def test_per_turn_a_long_answer_survives_a_reader_behind(
    fake: OpenAIChatFake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``opencode run`` says a text part whole when it ends, then exits; it drops what its
    stdout pipe has not taken by then. With the reader behind (here: it reads only once the
    process is gone) a ~130 KB answer was lost whole ("exited (0) without finishing the
    turn"). The turn's pipe has room for it (``TURN_STDOUT_BYTES``)."""

    monkeypatch.setattr(ManagedProcess, "stdout_lines", lines_after_exit)
    fake.slow_chunks, fake.slow_delay = 15_000, 0.0
    work = tmp_path / "work"
    work.mkdir()
    async with running(opencode_options(fake, tmp_path / "home", per_turn=True), work) as thread:
        events = await thread.turn("SLOWTEST")
    assert isinstance(events[-1].event, TurnCompleted), events[-1]
    assert _text(events) == "".join(f"chunk{i} " for i in range(15_000))


# -- MCP injection ----------------------------------------------------------------------------


def _mcp_reply(req: RecordedRequest) -> JSONResponse:
    """Just enough of an MCP streamable-HTTP server: handshake, one tool, its call."""
    if req.method != "POST":
        return JSONResponse(None, 405)  # no server-initiated SSE stream
    body = req.body if isinstance(req.body, dict) else {}
    method, rpc_id = body.get("method"), body.get("id")
    if rpc_id is None:
        return JSONResponse(None, 202)  # a notification
    if method == "initialize":
        result: dict[str, object] = {
            "protocolVersion": body.get("params", {}).get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "probe", "version": "1"},
        }
    elif method == "tools/list":
        schema = {"type": "object", "properties": {}}
        tool = {"name": "restart_process", "description": "restart", "inputSchema": schema}
        result = {"tools": [tool]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "restarted web"}]}
    else:
        error = {"code": -32601, "message": "not here"}
        return JSONResponse({"jsonrpc": "2.0", "id": rpc_id, "error": error})
    return JSONResponse({"jsonrpc": "2.0", "id": rpc_id, "result": result})


def _auth(req: RecordedRequest) -> str | None:
    return {k.lower(): v for k, v in req.headers.items()}.get("authorization")


async def test_mcp_servers_per_thread_each_on_a_server_of_its_own(
    fake: OpenAIChatFake, tmp_path: Path
) -> None:
    """Two threads of one directory, each with its own MCP token (as the app hands them
    out), get a server each: an agent reaches its server's whole API (opencode gives its
    tools the server's password), so on a shared server it could use the other thread's
    MCP registration, and token. Each session is offered only its own thread's MCP tools
    and calls them with its own token; each agent finds only its own registration."""
    mcp = FakeModelServer()
    mcp.route("*", "/mcp", _mcp_reply)
    mcp.start()
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"

    def with_token(token: str) -> AgentOptions:
        server = McpServer(name="process-manager", url=mcp.base_url + "/mcp", bearer_token=token)
        return opencode_options(fake, home).model_copy(
            update={"system_instruction": "Answer in haiku. SYSMARK-42", "mcp_servers": (server,)}
        )

    def run_command(req: RecordedRequest) -> list[SSEEvent] | None:
        """``RUNCMD: <command>`` makes the model run that command (once)."""
        messages = req.body.get("messages", []) if isinstance(req.body, dict) else []
        text = last_user_text(req.body)
        if "RUNCMD:" not in text or (messages and messages[-1].get("role") == "tool"):
            return None
        command = {"command": text.split("RUNCMD:", 1)[1].strip(), "description": "Run"}
        return list(fake.tool_call_reply("fake-model", "bash", command))

    fake.script = run_command
    user_config = home / ".config" / "opencode" / "opencode.json"
    options_a, options_b = with_token("tokA"), with_token("tokB")  # writes the home config
    before = user_config.read_text()
    try:
        async with (
            running(options_a, work) as one,
            running(options_b, work) as two,
        ):
            server = one.adapter.server
            assert server is not None and server.process is not None
            assert two.adapter.server is not server and server.refs == 1
            for pid in tree_pids(server.process.pid):
                try:
                    assert "tok" not in " ".join(psutil.Process(pid).cmdline())
                except psutil.Error:
                    pass
            # What an agent can reach: its server's API, with the password opencode gives
            # its tools. Only its own thread's registration is there.
            (mine,), (theirs,) = mcp_registrations(options_a), mcp_registrations(options_b)
            api = '-u "opencode:$OPENCODE_SERVER_PASSWORD" "http://127.0.0.1:$PORT/mcp"'
            probe = f"PORT={server.base_url.rsplit(':', 1)[1]}; curl -s {api}"
            registered = _text(await one.turn(f"RUNCMD: {probe}"))
            assert mine.name in registered and theirs.name not in registered, registered

            calls_before = len(mcp.requests)
            events = await one.turn("MCPTEST restart the web process")
            started = _of(events, ToolStarted)
            assert started and started[0].name.endswith("_restart_process")
            assert started[0].display_name == "Process Manager · Restart Process"
            finished = _of(events, ToolFinished)
            assert finished and "restarted web" in finished[0].result
            assert "Tool said: restarted web" in _text(events)
            offered = tool_names(fake.agent_requests()[-1].body)
            mine = [n for n in offered if n.startswith("process-manager")]
            assert mine == [started[0].name]  # thread two's tools are not offered here
            call = [
                r
                for r in mcp.requests[calls_before:]
                if r.body and isinstance(r.body, dict) and r.body.get("method") == "tools/call"
            ]
            assert [_auth(r) for r in call] == ["Bearer tokA"]
            # The system instruction rides on the prompt (prompt_async "system").
            system = fake.agent_requests()[-1].body["messages"][0]["content"]
            assert "SYSMARK-42" in json.dumps(system)

            other = await two.turn("MCPTEST restart it again")
            other_tool = _of(other, ToolStarted)[0].name
            assert other_tool.endswith("_restart_process") and other_tool != started[0].name
            offered = tool_names(fake.agent_requests()[-1].body)
            assert [n for n in offered if n.startswith("process-manager")] == [other_tool]
            calls = [
                r
                for r in mcp.requests
                if isinstance(r.body, dict) and r.body.get("method") == "tools/call"
            ]
            assert _auth(calls[-1]) == "Bearer tokB"
    finally:
        mcp.stop()
    assert user_config.read_text() == before  # the user's own config is untouched
    for path in home.rglob("*"):  # no token landed in the user's tree
        if path.is_file() and path.suffix in (".json", ".jsonc", ".toml", ".md", ""):
            assert b"tokA" not in path.read_bytes() and b"tokB" not in path.read_bytes(), path

"""The shared ``opencode serve`` pool and the adapter's failure paths, against a stand-in
server (``fixtures/opencode/fake_opencode_serve.py``: opencode's start-up line, basic auth,
the ``/event`` bus and the session calls) so that start-up failures, two threads on one
server and a dropped event stream can be staged exactly. The genuine CLI is exercised in
``test_opencode_integration.py``."""

from __future__ import annotations

import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from threadspindle.agents.base import AgentOptions, AgentStartError, McpServer, StampedEvent
from threadspindle.agents.opencode import OpencodeAdapter
from threadspindle.agents.opencode.server import live_servers
from threadspindle.effects.process import tree_pids
from threadspindle.runtime.core.agent_events import (
    AgentError,
    SessionStarted,
    TextDelta,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent

FAKE = Path(__file__).parents[1] / "fixtures" / "opencode" / "fake_opencode_serve.py"

pytestmark = pytest.mark.timeout(60)


def fake_binary(tmp_path: Path) -> str:
    script = tmp_path / "opencode"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def options(tmp_path: Path, mode: str = "normal", binary: str | None = None) -> AgentOptions:
    return AgentOptions(
        binary=binary or fake_binary(tmp_path),
        env=(("FAKE_OC_MODE", mode),),
        start_timeout_s=20.0,
        stop_grace_s=1.0,
    )


class Recorder:
    def __init__(self) -> None:
        self.events: list[StampedEvent] = []

    async def emit(self, event: StampedEvent) -> None:
        self.events.append(event)

    async def end_of(self, run_id: str, timeout: float = 15.0) -> StampedEvent:
        with trio.fail_after(timeout):
            while True:
                for e in self.events:
                    if e.run_id == run_id and isinstance(e.event, TurnCompleted | TurnAborted):
                        return e
                await trio.sleep(0.01)


@asynccontextmanager
async def serving(
    opts: AgentOptions, work: Path, resume: str | None = None
) -> AsyncIterator[tuple[OpencodeAdapter, Recorder]]:
    adapter, recorder = OpencodeAdapter(opts), Recorder()
    start = StartAgent(agent="opencode", workdir=str(work), session_id=resume)
    async with trio.open_nursery() as nursery:
        await nursery.start(adapter.serve, start, recorder.emit)
        try:
            yield adapter, recorder
        finally:
            with trio.CancelScope(shield=True):
                await adapter.stop()
            nursery.cancel_scope.cancel()


def prompt(run_id: str, work: Path) -> PromptAgent:
    return PromptAgent(run_id=run_id, text="hi", agent="opencode", workdir=str(work))


async def start_error(opts: AgentOptions, work: Path) -> AgentStartError:
    """What ``serve`` raises instead of getting ready (unwrapped from its nursery)."""
    adapter = OpencodeAdapter(opts)
    with pytest.raises(AgentStartError) as caught:
        await adapter.serve(
            StartAgent(agent="opencode", workdir=str(work)),
            Recorder().emit,
            task_status=trio.TASK_STATUS_IGNORED,
        )
    return caught.value


async def test_missing_binary_is_a_clear_start_error(tmp_path: Path) -> None:
    error = await start_error(
        options(tmp_path, binary=str(tmp_path / "no-such-opencode")), tmp_path
    )
    assert "cannot start" in str(error) and "no-such-opencode" in str(error)
    assert not live_servers()


async def test_a_server_that_dies_at_start_reports_its_own_words(tmp_path: Path) -> None:
    error = await start_error(options(tmp_path, "exit_early"), tmp_path)
    assert "exited with 3 before listening" in str(error)
    assert "Configuration is invalid" in str(error)
    assert not live_servers()


async def test_two_threads_share_one_server_each_hears_only_its_session(tmp_path: Path) -> None:
    opts = options(tmp_path)
    async with serving(opts, tmp_path) as (one, heard_one):
        async with serving(opts, tmp_path) as (two, heard_two):
            assert one.server is two.server and one.server is not None
            server = one.server
            assert server.refs == 2 and len(live_servers()) == 1
            assert one.session_id != two.session_id
            await one.prompt(prompt("a1", tmp_path))
            await two.prompt(prompt("b1", tmp_path))
            assert isinstance((await heard_one.end_of("a1")).event, TurnCompleted)
            assert isinstance((await heard_two.end_of("b1")).event, TurnCompleted)
            for recorder, adapter in ((heard_one, one), (heard_two, two)):
                text = "".join(
                    e.event.text for e in recorder.events if isinstance(e.event, TextDelta)
                )
                assert text == f"hi {adapter.session_id} there"
                assert {e.session_id for e in recorder.events} == {adapter.session_id}
            stats = server.statistics()
            assert stats.unrouted >= 2 and stats.routed > 0 and stats.subscribers == 2
            assert stats.types.get("plugin.added") == 1
            pids = tree_pids(server.process.pid)  # type: ignore[union-attr]
        assert server.refs == 1 and server.alive  # the other thread still uses it
    assert not server.alive and not live_servers()
    assert all(not Path(f"/proc/{pid}").exists() for pid in pids)


async def test_a_dropped_event_stream_reconnects_and_a_missed_turn_end_is_noticed(
    tmp_path: Path,
) -> None:
    async with serving(options(tmp_path, "drop_sse"), tmp_path) as (adapter, heard):
        assert isinstance(heard.events[0].event, SessionStarted)
        await adapter.prompt(prompt("r1", tmp_path))
        end = await heard.end_of("r1")
        assert isinstance(end.event, TurnAborted) and "event stream" in end.event.reason
        assert adapter.server is not None and adapter.server.statistics().sse_connects == 2
        # The thread goes on: the next turn is heard on the new stream.
        await adapter.prompt(prompt("r2", tmp_path))
        assert isinstance((await heard.end_of("r2")).event, TurnCompleted)


async def test_prompt_before_serve_is_refused(tmp_path: Path) -> None:
    adapter = OpencodeAdapter(options(tmp_path))
    with pytest.raises(RuntimeError, match="before serve"):
        await adapter.prompt(prompt("r1", tmp_path))
    await adapter.stop()  # nothing to stop: returns at once


async def test_resume_a_known_session_or_say_a_new_one_was_started(tmp_path: Path) -> None:
    opts = options(tmp_path)
    async with serving(opts, tmp_path) as (first, _):
        known = first.session_id
        async with serving(opts, tmp_path, resume=known) as (again, heard):
            assert again.session_id == known
            assert not [e for e in heard.events if isinstance(e.event, AgentError)]
        async with serving(opts, tmp_path, resume="ses_gone") as (fresh, heard):
            assert fresh.session_id not in (known, "ses_gone")
            started, error = heard.events[0].event, heard.events[1].event
            assert isinstance(started, SessionStarted) and started.session_id == fresh.session_id
            assert isinstance(error, AgentError) and "ses_gone" in error.message


async def test_mcp_servers_that_cannot_be_added_are_reported_not_fatal(tmp_path: Path) -> None:
    """The stand-in has no ``/mcp`` (nor ``PATCH /session``): the thread still starts, says
    why its MCP tools are missing, and works."""
    opts = options(tmp_path).model_copy(
        update={
            "mcp_servers": (McpServer(name="pm", url="http://127.0.0.1:9/mcp", bearer_token="t"),)
        }
    )
    async with serving(opts, tmp_path) as (first, heard):
        errors = [e.event for e in heard.events if isinstance(e.event, AgentError)]
        assert isinstance(heard.events[0].event, SessionStarted)
        assert len(errors) == 1 and "MCP server 'pm'" in errors[0].message
        await first.prompt(prompt("r1", tmp_path))
        assert isinstance((await heard.end_of("r1")).event, TurnCompleted)
        known = first.session_id
        async with serving(opts, tmp_path, resume=known) as (again, heard_again):
            assert again.session_id == known
            messages = [
                e.event.message for e in heard_again.events if isinstance(e.event, AgentError)
            ]
            assert any("resumed session" in m for m in messages)

"""The adapter contract: every agent adapter passes the same script, driven only through the
runtime's agent port (``runtime/live/ports.py: AgentPort``) and made only the runtime's way
(``adapter_class(name)(AgentOptions(...))``).

The four genuine CLIs from ``.agents`` (Claude Code, ``codex app-server``, ``gemini --acp``,
``opencode serve``) run against the project's fake model servers, each with a private HOME
and workdir; the generic ``command`` adapter runs ``testkit/command_agent.py`` (a small agent
of that protocol) against the Chat Completions fake; ``echo`` is the demo agent. The script,
in the order a thread lives it, sharing one started agent where the contract allows:

1. **start**: ``serve`` gets ready (``task_status.started()``).
2. **stream**: a plain prompt gives text deltas, then a ``TurnCompleted`` naming the session.
3. **tool**: a tool call (``pwd``) runs in the workdir: ``ToolStarted`` then ``ToolFinished``,
   and the model is told the workdir.
4. **permission**: a command that changes files (``touch``) is asked about first; allowed, it
   runs; denied, it does not, and the turn still ends normally.
5. **interrupt**: mid-stream, the turn ends ``TurnAborted("interrupted…")``; a normal turn
   then works (in the same process where the agent keeps one).
6. **stop**: mid-turn; the turn is not completed, ``serve`` returns, and psutil finds no
   process of the agent left.
7. **resume**: a new adapter started with the session id (the first process gone) continues
   the conversation: the model is sent the first turn's words again.
8. **crash**: the CLI is SIGKILLed mid-turn: the turn ends ``TurnAborted`` with the exit
   code, ``serve`` returns, nothing is left.

Every run, whatever the step, must be well-formed (``_check_runs``): one end, nothing of it
after its end, every tool card closed, one session. An adapter that cannot do a step
says so in ``CONTRACT`` below, with the reason, and is held to what it documents instead.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
import trio
from contract_harness import Driven, ProcessWatch, rig, serving

from threadspindle.agents import known_agents
from threadspindle.runtime.core.agent_events import (
    AgentError,
    PermissionRequested,
    SessionStarted,
    TitleChanged,
    ToolFinished,
    ToolStarted,
    TurnAborted,
    TurnCompleted,
)

pytestmark = pytest.mark.timeout(420)

STEPS = frozenset({"start", "stream", "tool", "permission", "interrupt", "stop", "resume", "crash"})


@dataclass(frozen=True)
class Contract:
    steps: frozenset[str]  # the steps the adapter does as the script says
    # long-lived: one process serves every turn and survives an interrupt; per-turn: a process
    # per prompt, none between turns; in-process: no process at all.
    process: Literal["long-lived", "per-turn", "in-process"]


# The one capability table. A step missing here is checked against what the adapter documents
# for it instead (docs/agents.md; echo: agents/echo.py, docs/commands.md).
CONTRACT: dict[str, Contract] = {
    "claude": Contract(STEPS, "long-lived"),
    "codex": Contract(STEPS, "long-lived"),
    "gemini": Contract(STEPS, "long-lived"),
    "opencode": Contract(STEPS, "long-lived"),
    # One process per turn ("Generic command"): it has no permission protocol (answers are
    # ignored), and a process killed mid-turn ends only that turn: serve goes on and the next
    # prompt starts a new process.
    "command": Contract(STEPS - {"permission", "crash"}, "per-turn"),
    # The demo runs in-process: its tool is simulated (a card, nothing runs), it keeps no
    # conversation (a resumed session keeps its id only), and there is no process to crash.
    "echo": Contract(STEPS - {"tool", "resume", "crash"}, "in-process"),
}

MARKER = "ZEBRA-7731"  # a word of the first turn that a resumed conversation still has
FIRST_PROMPT = f"hello, remember the word {MARKER}"
RESUME_PROMPT = "which word was it"
TOOL_PROMPT = "PWDTEST tool"  # "tool": the echo demo's simulated tool
TOUCH_PROMPT = "TOUCHTEST ask"  # "ask": the echo demo's permission prompt
# Words for the echo demo to say slowly; the fake models stream 40 chunks. Either way the
# last one ends in 39, so a stream cut short lacks it.
SLOW_PROMPT = "SLOWTEST " + " ".join(f"w{i}" for i in range(40))


def test_the_table_names_every_agent() -> None:
    assert set(CONTRACT) == set(known_agents())
    assert all(contract.steps <= STEPS for contract in CONTRACT.values())


@pytest.mark.parametrize("agent", list(CONTRACT))
async def test_adapter_contract(agent: str, tmp_path: Path) -> None:
    contract = CONTRACT[agent]
    with rig(agent, tmp_path) as setup:
        watch = ProcessWatch(setup.binary)
        async with serving(setup, watch) as first:
            _check_start(first, contract)
            session_id = await _stream(first)
            await _tool(first, contract)
            await _permission(first, contract)
            await _interrupt(first, contract)
            await _stop(first, contract)
        async with serving(setup, ProcessWatch(setup.binary), session_id=session_id) as second:
            _check_start(second, contract)
            await _resume(second, contract, session_id)
            await _crash(second, contract)
        _check_runs(first, stopped_run="a-stop")
        _check_runs(second, stopped_run=None)


# --- the steps ---------------------------------------------------------------------------


def _check_start(driven: Driven, contract: Contract) -> None:
    clis = driven.watch.look()
    if contract.process == "long-lived":
        assert len(clis) == 1, f"{driven.rig.agent}: one CLI process once ready, got {clis}"
    else:  # per-turn: nothing runs before a prompt; in-process: never anything
        assert clis == [], f"{driven.rig.agent}: no process before a prompt, got {clis}"
    assert not any(s.run_id for s in driven.events), "events of a run before any prompt"


async def _stream(driven: Driven) -> str:
    end = await driven.turn("a-stream", FIRST_PROMPT)
    agent, events = driven.rig.agent, driven.of_run("a-stream")
    done = end.event
    assert isinstance(done, TurnCompleted) and not done.is_error, f"{agent}: {done!r}"
    assert done.session_id, f"{agent}: the completion names no session"
    assert end.session_id == done.session_id, f"{agent}: stamped {end.session_id}"
    assert driven.deltas("a-stream") >= 2, f"{agent}: text not streamed: {events}"
    assert driven.text_of("a-stream") == driven.rig.answer(FIRST_PROMPT)
    assert not any(isinstance(e, ToolStarted | PermissionRequested) for e in events)
    return done.session_id


async def _tool(driven: Driven, contract: Contract) -> None:
    end = await driven.turn("a-tool", TOOL_PROMPT)
    agent, events = driven.rig.agent, driven.of_run("a-tool")
    assert isinstance(end.event, TurnCompleted) and not end.event.is_error, f"{agent}: {end!r}"
    started = [e for e in events if isinstance(e, ToolStarted)]
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert len(started) == 1 and [f.tool_id for f in finished] == [started[0].tool_id], events
    assert not finished[0].is_error, f"{agent}: {finished[0]!r}"
    assert not any(isinstance(e, PermissionRequested) for e in events), f"{agent}: pwd asked"
    workdir = os.path.realpath(driven.rig.workdir)
    if "tool" in contract.steps:
        # The model was sent the tool's output: the workdir the tool really ran in.
        assert workdir in driven.text_of("a-tool"), f"{agent}: {driven.text_of('a-tool')!r}"
    else:  # echo: a simulated card only, nothing ran
        assert workdir not in driven.text_of("a-tool")
        assert driven.text_of("a-tool") == driven.rig.answer(TOOL_PROMPT)


async def _permission(driven: Driven, contract: Contract) -> None:
    agent, touched = driven.rig.agent, driven.rig.workdir / "touched.txt"
    await _answer_nobody_asked_for(driven)
    if "permission" not in contract.steps:
        # The command protocol has no permission requests: a file-changing tool just runs.
        end = await driven.turn("a-allow", TOUCH_PROMPT)
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error
        assert not any(isinstance(e, PermissionRequested) for e in driven.of_run("a-allow"))
        assert touched.exists(), f"{agent}: the command's tool did not run"
        touched.unlink()
        return
    for run_id, allow in (("a-allow", True), ("a-deny", False)):
        await driven.prompt(run_id, TOUCH_PROMPT)
        asked = await driven.wait_for(
            f"permission request of {run_id}",
            lambda s, r=run_id: s.run_id == r and isinstance(s.event, PermissionRequested),
        )
        assert isinstance(asked.event, PermissionRequested)
        assert not touched.exists(), f"{agent}: the tool ran before it was allowed"
        await driven.adapter.answer_permission(asked.event.request_id, allow)
        end = await driven.end_of(run_id)
        # A second answer to the same request is ignored (checked by _check_runs: nothing
        # of this run arrives after its end).
        await driven.adapter.answer_permission(asked.event.request_id, not allow)
        events = driven.of_run(run_id)
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error, (
            f"{agent} {run_id}: {end.event!r}"
        )
        ran = [e for e in events if isinstance(e, ToolFinished) and not e.is_error]
        if "tool" in contract.steps:
            assert touched.exists() is allow, f"{agent} {run_id}: touched={touched.exists()}"
            assert bool(ran) is allow, f"{agent} {run_id}: {events}"
        elif allow:  # echo: allowed, it echoes; denied, it says so and echoes nothing
            assert driven.text_of(run_id) == driven.rig.answer(TOUCH_PROMPT)
        else:
            assert "denied" in driven.text_of(run_id)
        if touched.exists():
            touched.unlink()


async def _answer_nobody_asked_for(driven: Driven) -> None:
    """An answer to a request the agent never made is ignored, or refused with a clear error
    naming it (opencode's server refuses an id not of its form; the reactor reports that as
    a failed effect). Either way it emits nothing and the agent carries on (checked by the
    steps after it and by ``_check_runs``)."""
    unknown = "contract-no-such-request"
    for answer in (
        lambda: driven.adapter.answer_permission(unknown, True),
        lambda: driven.adapter.answer_question(unknown, "Red"),
    ):
        try:
            with trio.fail_after(10):
                await answer()
        except Exception as exc:  # a clear refusal; anything else fails below
            assert unknown in str(exc), f"{driven.rig.agent}: unclear refusal {exc!r}"


async def _interrupt(driven: Driven, contract: Contract) -> None:
    agent = driven.rig.agent
    await driven.prompt("a-interrupt", SLOW_PROMPT)
    await driven.wait_for("two text deltas", lambda s: driven.deltas("a-interrupt") >= 2)
    before = driven.watch.identity()
    await driven.adapter.interrupt("a-interrupt")
    end = await driven.end_of("a-interrupt", timeout=30)
    assert isinstance(end.event, TurnAborted), f"{agent}: {end.event!r}"
    assert end.event.reason.startswith("interrupted"), f"{agent}: {end.event.reason!r}"
    assert "39" not in driven.text_of("a-interrupt"), f"{agent}: the stream was not cut"
    # Interrupting a run that is over is ignored (nothing of it arrives after its end).
    await driven.adapter.interrupt("a-interrupt")
    after = await driven.turn("a-after", "hello again")
    assert isinstance(after.event, TurnCompleted) and not after.event.is_error, after
    assert driven.text_of("a-after") == driven.rig.answer("hello again")
    if contract.process == "long-lived":
        assert before and driven.watch.identity() == before, f"{agent}: the process changed"
    else:
        assert driven.watch.look() == [] and driven.watch.left() == [], driven.watch.left()


async def _stop(driven: Driven, contract: Contract) -> None:
    """Stop in the middle of a turn, as a thread being closed does."""
    await driven.prompt("a-stop", SLOW_PROMPT)
    await driven.wait_for("a text delta", lambda s: driven.deltas("a-stop") >= 1)
    driven.watch.look()
    with trio.fail_after(30):
        await driven.adapter.stop()
    driven.stopped = True
    await driven.wait_served("after stop()")
    assert driven.watch.left() == [], f"{driven.rig.agent}: left behind {driven.watch.left()}"
    assert driven.adapter.statistics() is not None  # its counters, readable after the end
    if contract.process != "in-process":
        assert driven.watch.seen, "the watch saw no process of the agent"


async def _resume(driven: Driven, contract: Contract, session_id: str) -> None:
    agent = driven.rig.agent
    asked_before = len(driven.rig.model_requests())
    end = await driven.turn("b-resume", RESUME_PROMPT)
    assert isinstance(end.event, TurnCompleted) and not end.event.is_error, f"{agent}: {end!r}"
    assert end.event.session_id == session_id, f"{agent}: a new session {end.event.session_id}"
    assert not [e for e in driven.of_run("b-resume") if isinstance(e, AgentError)]
    assert driven.text_of("b-resume") == driven.rig.answer(RESUME_PROMPT)
    sent = [json.dumps(r.body) for r in driven.rig.model_requests()[asked_before:]]
    if "resume" in contract.steps:
        assert any(RESUME_PROMPT in body and MARKER in body for body in sent), (
            f"{agent}: the model was not sent the first turn again"
        )
    else:  # echo: the session id is kept, and there is no model to remember anything
        assert sent == []


async def _crash(driven: Driven, contract: Contract) -> None:
    agent = driven.rig.agent
    if contract.process == "in-process":
        # Nothing to crash: the demo never started a process.
        assert driven.watch.seen == {}
        with trio.fail_after(30):
            await driven.adapter.stop()
        driven.stopped = True
        await driven.wait_served("after stop()")
        return
    await driven.prompt("b-crash", SLOW_PROMPT)
    await driven.wait_for("two text deltas", lambda s: driven.deltas("b-crash") >= 2)
    clis = driven.watch.look()
    assert clis, f"{agent}: no CLI process mid-turn"
    for cli in clis:
        cli.send_signal(signal.SIGKILL)
    end = await driven.end_of("b-crash", timeout=30)
    assert isinstance(end.event, TurnAborted), f"{agent}: {end.event!r}"
    assert end.event.exit_code == -signal.SIGKILL, f"{agent}: {end.event!r}"
    if "crash" in contract.steps:
        # The agent is gone: serve returns by itself (the listener then starts it again).
        await driven.wait_served("after the CLI was killed")
    else:  # per-turn: only that turn's process died; the next prompt gets a new one
        assert not driven.served.is_set(), f"{agent}: serve() ended with one turn's process"
        after = await driven.turn("b-after-crash", "hello again")
        assert isinstance(after.event, TurnCompleted) and not after.event.is_error
    assert driven.watch.left() == [], f"{agent}: left behind {driven.watch.left()}"
    # stop() after the agent is gone (a thread closed just then) is harmless.
    with trio.fail_after(30):
        await driven.adapter.stop()
    driven.stopped = True
    await driven.wait_served("after stop()")
    assert driven.watch.left() == [], f"{agent}: left behind {driven.watch.left()}"


# --- what every run must be, whatever the step -----------------------------------------------


def _check_runs(driven: Driven, *, stopped_run: str | None) -> None:
    """Each prompted run ended once (the one stopped mid-turn at most once, not completed),
    nothing of a run came after its end, every tool card was closed, and one run's events
    name one session. Events of no run only say which session is starting (or why it
    could not be resumed), or the conversation's title (asked after a turn, the core
    takes it between turns)."""
    agent = driven.rig.agent
    runs: dict[str, list[tuple[str | None, object]]] = {}
    for stamped in driven.events:
        if stamped.run_id is None:
            assert isinstance(stamped.event, SessionStarted | AgentError | TitleChanged), (
                f"{agent}: an event of no run: {stamped!r}"
            )
            continue
        runs.setdefault(stamped.run_id, []).append((stamped.session_id, stamped.event))
    for run_id, stamped_events in runs.items():
        events = [event for _, event in stamped_events]
        ends = [i for i, e in enumerate(events) if isinstance(e, TurnCompleted | TurnAborted)]
        if run_id == stopped_run:
            # stop() may end the open turn (the CLIs interrupt it in-band first) or not (the
            # echo demo's stop can cancel it before it says so): the core, which asked for
            # the stop, has ended the run itself. Never as completed, never twice.
            assert len(ends) <= 1, f"{agent} {run_id}: {len(ends)} ends: {events}"
            assert not any(isinstance(events[i], TurnCompleted) for i in ends), events
        else:
            assert len(ends) == 1, f"{agent} {run_id}: {len(ends)} ends: {events}"
        if ends:
            assert ends[0] == len(events) - 1, f"{agent} {run_id}: events after its end: {events}"
        opened = {e.tool_id for e in events if isinstance(e, ToolStarted)}
        closed = {e.tool_id for e in events if isinstance(e, ToolFinished)}
        assert opened <= closed, f"{agent} {run_id}: tool cards left open: {opened - closed}"
        sessions = {session for session, _ in stamped_events if session is not None}
        assert len(sessions) <= 1, f"{agent} {run_id}: several sessions {sessions}"

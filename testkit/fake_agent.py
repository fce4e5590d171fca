"""Fake agents for runtime tests: an in-process scripted adapter and a stream-json process.

``ScriptedAgent`` is an ``AgentAdapter`` living in the test's trio run. What it does for a
prompt is chosen by words in the prompt text (like the fake model server's scenarios):

- ``SLOW``: 20 text deltas, 0.5 s apart (a slow stream);
- ``TOOL``: a tool call that takes 30 s (a long tool step), then text;
- ``PERMISSION`` / ``QUESTION``: asks, waits for the answer, then text;
- ``CRASH``: the "process" dies in the middle of the turn (``serve`` returns);
- ``SILENT``: says nothing at all (the core's idle timeout must end the turn);
- anything else: ``Hello from fake agent.`` in two deltas.

Every turn starts with ``SessionStarted`` and ends with ``TurnCompleted``, or with
``TurnAborted("interrupted")`` when interrupted in-band (``interrupt_delay_s`` later: a CLI
takes a moment to stop). All adapters made by one
``FakeAgentWorld`` share its records (prompts delivered, serve calls, interrupts), so a test
sees across agent restarts.

Run as a program (``python -m threadspindle.testkit.fake_agent``) it is a small stand-in
for ``claude -p --input-format stream-json --output-format stream-json``: it answers
``initialize`` and ``interrupt`` control requests, asks ``can_use_tool`` for
``PERMISSION`` prompts, and prints ``system/init``, ``stream_event`` text deltas,
``assistant`` and ``result`` lines like the real CLI 2.1.197 (see
/work/shared/fixtures/agent-cli/REPORT.md section 1 and addendum), so the real
``ClaudeAdapter`` can drive it as a process. ``fake_claude_binary`` writes an
executable wrapper for ``AgentOptions(binary=...)``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import stat
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from threadspindle.agents.base import AgentAdapter, AgentOptions, EmitEvent, StampedEvent
from threadspindle.agents.base.session_router import SessionRouter
from threadspindle.runtime.core.agent_events import (
    AgentEvent,
    PermissionRequested,
    QuestionAsked,
    SessionStarted,
    SteerRefused,
    SteerTaken,
    TextDelta,
    TitleChanged,
    ToolFinished,
    ToolStarted,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import (
    PromptAgent,
    RollbackAgent,
    StartAgent,
    SteerAgent,
)
from threadspindle.runtime.core.model import AgentCapabilities

__all__ = [
    "FakeAgentServer",
    "FakeAgentWorld",
    "SharedSessionAdapter",
    "ScriptedAgent",
    "Step",
    "default_script",
    "fake_claude_binary",
]


# --- the script ------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One thing the fake agent does in a turn."""

    kind: str  # "event" | "sleep" | "ask" | "crash"
    event: AgentEvent | None = None
    seconds: float = 0.0


def default_script(text: str) -> list[Step]:
    """The steps of one turn, chosen by keywords in the prompt."""

    def say(t: str) -> Step:
        return Step("event", TextDelta(text=t))

    if "TITLE" in text:
        # The CLI names its session (Codex thread/name/updated, an OpenCode title ...):
        # three titles in quick succession, to see renames paced and coalesced.
        titles = [TitleChanged(title=f"Session title {n}") for n in (1, 2, 3)]
        return [*(Step("event", t) for t in titles), say("Titled.")]
    if "CRASH" in text:
        return [say("Starting... "), Step("sleep", seconds=0.2), Step("crash")]
    if "SILENT" in text:
        return [Step("sleep", seconds=10_000)]
    if "SLOW" in text:
        steps = []
        for i in range(20):
            steps += [say(f"chunk{i} "), Step("sleep", seconds=0.5)]
        return steps
    if "TOOL" in text:
        return [
            say("Running a tool. "),
            Step(
                "event",
                ToolStarted(
                    tool_id="tool1", name="Bash", display_name="Bash", input_summary="sleep 30"
                ),
            ),
            Step("sleep", seconds=30.0),
            Step("event", ToolFinished(tool_id="tool1", result="done")),
            say("Tool said: done"),
        ]
    if "PERMISSION" in text:
        return [
            Step("ask", PermissionRequested(request_id="perm1", tool="Bash", detail="touch x")),
            say("Permission answered."),
        ]
    if "QUESTION" in text:
        return [
            Step("ask", QuestionAsked(request_id="q1", question="Which?", options=("a", "b"))),
            say("Question answered."),
        ]
    return [say("Hello from "), Step("sleep", seconds=0.01), say("fake agent.")]


# --- the in-process adapter ----------------------------------------------------------------


@dataclass
class FakeAgentWorld:
    """Shared records of every ``ScriptedAgent`` a test's factory made."""

    script: Callable[[str], list[Step]] = default_script
    delivered: list[tuple[str, str]] = field(default_factory=list)  # (run_id, text)
    prompts: list[PromptAgent] = field(default_factory=list)  # each as sent (attachments ...)
    interrupts: list[str] = field(default_factory=list)
    steered: list[tuple[str, str]] = field(default_factory=list)  # (run_id, text) taken
    can_steer: bool = True  # what each ScriptedAgent declares
    can_rollback: bool = False  # ... and whether it rolls back (and restores) turns
    rollbacks: list[tuple[str, str, int]] = field(default_factory=list)  # (op, run_id, turns)
    can_shell: bool = False  # ... and whether it runs `!` commands in a shell of its own
    shell_commands: list[str] = field(default_factory=list)  # what it was asked to run
    forks: list[str] = field(default_factory=list)  # sessions forked (StartAgent.fork)
    answers: list[tuple[str, object]] = field(default_factory=list)
    serve_calls: int = 0
    serve_times: list[float] = field(default_factory=list)  # trio time of each serve()
    starts: list[StartAgent] = field(default_factory=list)
    serving: int = 0  # adapters whose serve() is running now
    stops: int = 0
    fail_start: int = 0  # the next N serve() calls fail before they are ready
    start_delay_s: float = 0.05  # how long a "process" takes to get ready
    # How long a turn takes to end after an in-band interrupt (a CLI finishing its step).
    interrupt_delay_s: float = 0.0
    on_prompt: Callable[[PromptAgent], None] | None = None
    adapters: list[ScriptedAgent] = field(default_factory=list)
    _sessions: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def factory(self, start: StartAgent, thread_id: str) -> ScriptedAgent:
        """The runtime's ``AdapterFactory``: a fresh scripted agent (any agent name)."""
        adapter = ScriptedAgent(AgentOptions(), world=self)
        self.adapters.append(adapter)
        return adapter

    def live(self) -> list[ScriptedAgent]:
        return [a for a in self.adapters if a.alive]

    def crash_all(self) -> int:
        """Kill every live fake agent "process" (serve returns): the listener must notice."""
        n = 0
        for adapter in self.live():
            adapter.crash()
            n += 1
        return n


class ScriptedAgent(AgentAdapter):
    name = "fake"

    def __init__(self, options: AgentOptions, *, world: FakeAgentWorld | None = None) -> None:
        super().__init__(options)
        self.world = world or FakeAgentWorld()
        self.alive = False
        self.session_id: str | None = None
        self._emit: EmitEvent | None = None
        self._exit = trio.Event()
        self._send, self._recv = trio.open_memory_channel[PromptAgent](64)
        self._turn: tuple[str, trio.CancelScope] | None = None
        self._answers: dict[str, trio.Event] = {}
        self._interrupted: set[str] = set()
        self._nursery: trio.Nursery | None = None
        rollback = self.world.can_rollback
        self.capabilities = AgentCapabilities(
            steer=self.world.can_steer,
            compact=True,
            fork=True,
            rollback=rollback,
            restore=rollback,
            shell=self.world.can_shell,
        )

    async def serve(
        self, start: StartAgent, emit: EmitEvent, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        world = self.world
        world.serve_calls += 1
        world.serve_times.append(trio.current_time())
        world.starts.append(start)
        await trio.sleep(world.start_delay_s)  # a process takes a moment to start
        if world.fail_start > 0:
            world.fail_start -= 1
            raise RuntimeError("fake agent failed to start")
        self.session_id = start.session_id or f"sess-{next(world._sessions)}"
        if start.fork and start.session_id:
            world.forks.append(start.session_id)  # a fork continues a copy: a new session
            self.session_id = f"sess-{next(world._sessions)}"
        self._emit = emit
        self.alive = True
        world.serving += 1
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._turns)
                task_status.started()
                await self._exit.wait()
                nursery.cancel_scope.cancel()
        finally:
            self.alive = False
            world.serving -= 1

    async def _turns(self) -> None:
        async for prompt in self._recv:
            with trio.CancelScope() as scope:
                if prompt.run_id in self._interrupted:
                    scope.cancel()  # interrupted before its turn began
                self._turn = (prompt.run_id, scope)
                await self._say(prompt.run_id, SessionStarted(session_id=self.session_id or ""))
                for step in self.world.script(prompt.text):
                    if step.kind == "event":
                        assert step.event is not None
                        await self._say(prompt.run_id, step.event)
                    elif step.kind == "sleep":
                        await trio.sleep(step.seconds)
                    elif step.kind == "ask":
                        assert step.event is not None
                        answered = self._answers.setdefault(step.event.request_id, trio.Event())  # type: ignore[union-attr]
                        await self._say(prompt.run_id, step.event)
                        await answered.wait()
                    elif step.kind == "crash":
                        self.crash()
                        await trio.sleep_forever()
                await self._say(
                    prompt.run_id,
                    TurnCompleted(session_id=self.session_id, cost_usd=0.001, duration_ms=100),
                )
            self._turn = None
            if scope.cancelled_caught and self.alive and not self._exit.is_set():
                await self._say(prompt.run_id, TurnAborted(reason="interrupted"))

    async def _say(self, run_id: str, event: AgentEvent) -> None:
        assert self._emit is not None
        await self._emit(StampedEvent(run_id, self.session_id, event))

    async def prompt(self, prompt: PromptAgent) -> None:
        if not self.alive:
            raise RuntimeError("fake agent is not running")
        self.world.delivered.append((prompt.run_id, prompt.text))
        self.world.prompts.append(prompt)
        if self.world.on_prompt is not None:
            self.world.on_prompt(prompt)
        self._send.send_nowait(prompt)

    async def steer(self, steer: SteerAgent) -> None:
        """Taken when that run's turn is the one running (recorded in the world), else
        refused: what a CLI that steers natively reports."""
        if not self.world.can_steer:
            await super().steer(steer)
        if self._turn is not None and self._turn[0] == steer.run_id:
            self.world.steered.append((steer.run_id, steer.text))
            await self._say(steer.run_id, SteerTaken(steer_id=steer.steer_id))
        else:
            await self._say(steer.run_id, SteerRefused(steer_id=steer.steer_id, reason="no turn"))

    async def rollback(self, rollback: RollbackAgent) -> None:
        if not self.world.can_rollback:
            await super().rollback(rollback)
        self.world.rollbacks.append((rollback.op, rollback.run_id, rollback.turns))

    async def shell(self, command: str, output: Callable[[str], None]) -> int | None:
        """Records the command, says it ran it, then takes as long as a number after
        ``sleep `` in it says (an /abort cancels that); exit code 0."""
        if not self.world.can_shell:
            return await super().shell(command, output)
        self.world.shell_commands.append(command)
        output(f"agent shell ran: {command}\n")
        _, _, wait = command.partition("sleep ")
        await trio.sleep(float(wait.split()[0]) if wait else 0)
        return 0

    async def interrupt(self, run_id: str) -> None:
        self.world.interrupts.append(run_id)
        self._interrupted.add(run_id)
        if self._turn is not None and self._turn[0] == run_id:
            scope = self._turn[1]
            if self.world.interrupt_delay_s > 0 and self._nursery is not None:
                self._nursery.start_soon(self._cancel_later, scope, self.world.interrupt_delay_s)
            else:
                scope.cancel()

    @staticmethod
    async def _cancel_later(scope: trio.CancelScope, delay: float) -> None:
        await trio.sleep(delay)
        scope.cancel()

    async def answer_permission(self, request_id: str, allow: bool) -> None:
        self.world.answers.append((request_id, allow))
        self._answers.setdefault(request_id, trio.Event()).set()

    async def answer_question(self, request_id: str, answer: str | None) -> None:
        self.world.answers.append((request_id, answer))
        self._answers.setdefault(request_id, trio.Event()).set()

    async def stop(self) -> None:
        self.world.stops += 1
        self._exit.set()

    def crash(self) -> None:
        self._exit.set()


# --- a shared agent server ------------------------------------------------------------------


class FakeAgentServer:
    """One agent server shared by many threads, like ``opencode serve``: a single event
    connection carries the events of every session, and the agents' ``SessionRouter``
    routes them to the thread listening on each session (as the opencode adapter's server
    does). ``adapter`` is the per-thread adapter factory."""

    def __init__(self, script: Callable[[str], list[Step]] = default_script) -> None:
        self.router: SessionRouter[StampedEvent] = SessionRouter()
        self.script = script
        self.connections = 0  # event connections opened (one for all threads)
        self.delivered: list[tuple[str, str, str]] = []  # (session, run_id, text)
        self._send, self._recv = trio.open_memory_channel[StampedEvent](math.inf)
        self._nursery: trio.Nursery | None = None
        self._sessions = itertools.count(1)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """The server and its one event connection, fanned out by the router."""
        self.connections += 1
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            async for event in self._recv:
                self.router.route(event.session_id, event)

    def new_session(self) -> str:
        return f"shared-{next(self._sessions)}"

    def start_turn(self, session_id: str, prompt: PromptAgent) -> None:
        assert self._nursery is not None, "start the server first"
        self.delivered.append((session_id, prompt.run_id, prompt.text))
        self._nursery.start_soon(self._turn, session_id, prompt)

    async def _turn(self, session_id: str, prompt: PromptAgent) -> None:
        def out(event: AgentEvent) -> None:
            self._send.send_nowait(StampedEvent(prompt.run_id, session_id, event))

        out(SessionStarted(session_id=session_id))
        for step in self.script(prompt.text):
            if step.kind == "event" and step.event is not None:
                out(step.event)
            elif step.kind == "sleep":
                await trio.sleep(step.seconds)
        out(TurnCompleted(session_id=session_id))

    def adapter(self, start: StartAgent, thread_id: str) -> SharedSessionAdapter:
        return SharedSessionAdapter(AgentOptions(), server=self)


class SharedSessionAdapter(AgentAdapter):
    """One thread's view of a ``FakeAgentServer``: no process of its own; ``serve`` claims
    the thread's session on the shared connection and lasts until ``stop``."""

    name = "shared"

    def __init__(self, options: AgentOptions, *, server: FakeAgentServer) -> None:
        super().__init__(options)
        self.server = server
        self.session_id: str | None = None
        self._exit = trio.Event()

    async def serve(
        self, start: StartAgent, emit: EmitEvent, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        self.session_id = start.session_id or self.server.new_session()
        subscription = self.server.router.subscribe(self.session_id)
        try:
            task_status.started()
            async with trio.open_nursery() as nursery:

                async def deliver() -> None:
                    async for event in subscription.receive:
                        await emit(event)

                nursery.start_soon(deliver)
                await self._exit.wait()
                nursery.cancel_scope.cancel()
        finally:
            self.server.router.unsubscribe(subscription)

    async def prompt(self, prompt: PromptAgent) -> None:
        assert self.session_id is not None
        self.server.start_turn(self.session_id, prompt)

    async def interrupt(self, run_id: str) -> None:
        return None

    async def answer_permission(self, request_id: str, allow: bool) -> None:
        return None

    async def answer_question(self, request_id: str, answer: str | None) -> None:
        return None

    async def stop(self) -> None:
        self._exit.set()


# --- the stream-json process -----------------------------------------------------------------


def fake_claude_binary(directory: str, *, delay_s: float = 0.05) -> str:
    """Write an executable ``claude`` stand-in into ``directory``; returns its path."""
    path = os.path.join(directory, "fake-claude")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(path, "w") as f:
        f.write(
            f"#!/bin/sh\nFAKE_AGENT_DELAY={delay_s} PYTHONPATH={root} exec {sys.executable} "
            f'-m threadspindle.testkit.fake_agent "$@"\n'
        )
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


class _StreamJsonAgent:
    """The process side: reads stdin lines, runs turns in a worker thread."""

    def __init__(self, argv: list[str]) -> None:
        self.session_id = (
            argv[argv.index("--resume") + 1] if "--resume" in argv else str(uuid.uuid4())
        )
        self.delay = float(os.environ.get("FAKE_AGENT_DELAY", "0.05"))
        self._out = threading.Lock()
        self._turns: list[str] = []
        self._turn_ready = threading.Condition()
        self._interrupt = threading.Event()
        self._answers: dict[str, dict[str, Any]] = {}
        self._answered = threading.Condition()
        self._closed = False

    def write(self, obj: dict[str, Any]) -> None:
        with self._out:
            sys.stdout.write(json.dumps(obj) + "\n")
            sys.stdout.flush()

    def main(self) -> int:
        worker = threading.Thread(target=self._work, daemon=True)
        worker.start()
        for raw in sys.stdin:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            kind = msg.get("type")
            if kind == "user":
                content = msg["message"]["content"]
                text = (
                    content
                    if isinstance(content, str)
                    else " ".join(c.get("text", "") for c in content if isinstance(c, dict))
                )
                with self._turn_ready:
                    self._turns.append(text)
                    self._turn_ready.notify()
            elif kind == "control_request":
                rid, sub = msg["request_id"], msg["request"].get("subtype")
                if sub == "interrupt":
                    self._interrupt.set()
                self.write(
                    {
                        "type": "control_response",
                        "response": {"subtype": "success", "request_id": rid},
                    }
                )
            elif kind == "control_response":
                resp = msg.get("response", {})
                with self._answered:
                    self._answers[resp.get("request_id", "")] = resp.get("response") or {}
                    self._answered.notify_all()
        with self._turn_ready:
            self._closed = True
            self._turn_ready.notify()
        worker.join(timeout=5)
        return 0

    def _work(self) -> None:
        while True:
            with self._turn_ready:
                while not self._turns and not self._closed:
                    self._turn_ready.wait()
                if not self._turns:
                    return
                text = self._turns.pop(0)
            self._interrupt.clear()
            self._turn(text)

    def _line(self, **fields: Any) -> dict[str, Any]:
        return {**fields, "session_id": self.session_id, "uuid": str(uuid.uuid4())}

    def _turn(self, text: str) -> None:
        started = time.monotonic()
        self.write(
            self._line(
                type="system",
                subtype="init",
                cwd=os.getcwd(),
                tools=["Bash"],
                model="fake-model",
                permissionMode="default",
            )
        )
        chunks = ["Hello from ", "fake agent."]
        if "SLOW" in text:
            chunks = [f"chunk{i} " for i in range(20)]
        if "CRASH" in text:
            self._delta(0, "Starting... ")
            time.sleep(self.delay)
            os._exit(3)
        if "PERMISSION" in text:
            rid = str(uuid.uuid4())
            self.write(
                {
                    "type": "control_request",
                    "request_id": rid,
                    "request": {
                        "subtype": "can_use_tool",
                        "tool_name": "Bash",
                        "display_name": "Bash",
                        "input": {"command": "touch x"},
                        "description": "Run command",
                    },
                }
            )
            with self._answered:
                while rid not in self._answers and not self._interrupt.is_set():
                    self._answered.wait(0.05)
        said = ""
        for chunk in chunks:
            if self._interrupt.is_set():
                break
            self._delta(0, chunk)
            said += chunk
            time.sleep(self.delay)
        if self._interrupt.is_set():
            self.write(
                self._line(
                    type="assistant",
                    message={
                        "role": "assistant",
                        "model": "fake-model",
                        "content": [{"type": "text", "text": said}],
                    },
                    parent_tool_use_id=None,
                )
            )
            self.write(
                self._line(
                    type="user",
                    message={
                        "role": "user",
                        "content": [{"type": "text", "text": "[Request interrupted by user]"}],
                    },
                    parent_tool_use_id=None,
                )
            )
            self.write(
                self._line(
                    type="result",
                    subtype="error_during_execution",
                    is_error=True,
                    duration_ms=int((time.monotonic() - started) * 1000),
                    terminal_reason="aborted_streaming",
                    num_turns=1,
                )
            )
            return
        self.write(
            self._line(
                type="assistant",
                message={
                    "role": "assistant",
                    "model": "fake-model",
                    "content": [{"type": "text", "text": said}],
                },
                parent_tool_use_id=None,
            )
        )
        self.write(
            self._line(
                type="result",
                subtype="success",
                is_error=False,
                result=said,
                duration_ms=int((time.monotonic() - started) * 1000),
                total_cost_usd=0.0001,
                num_turns=1,
                stop_reason="end_turn",
                terminal_reason="completed",
            )
        )

    def _delta(self, index: int, text: str) -> None:
        self.write(
            self._line(
                type="stream_event",
                parent_tool_use_id=None,
                event={
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": text},
                },
            )
        )


if __name__ == "__main__":
    sys.exit(_StreamJsonAgent(sys.argv[1:]).main())

"""The generic command adapter: any program that reads a prompt on stdin and writes lines.

One process per turn, started in the thread's workdir: the prompt is written to its stdin,
which is then closed; every stdout line becomes events (``CommandLineParser``); the turn ends
when the process exits: exit code 0 is ``TurnCompleted``, anything else ``TurnAborted`` with
the exit code and the last stderr lines. ``interrupt`` stops the turn's whole process tree.

Output lines: plain text is answer text (``TextDelta``, one per line, newline kept). A JSON
object with a ``type`` is an event:

- ``{"type": "text", "text": ...}`` and ``{"type": "thinking", "text": ...}``
- ``{"type": "tool_start", "id", "name", "input"}`` / ``{"type": "tool_end", "id", "result",
  "is_error"}``
- ``{"type": "error", "message", "retryable"}``
- ``{"type": "session", "id", "model"}``
- ``{"type": "result", "session_id", "cost_usd", "model", "is_error", "error"}``: details for
  the ``TurnCompleted`` sent at exit.

Other JSON objects are skipped and counted; a known type with wrong fields is malformed.
The command sees ``SPINDLE_RUN_ID``, ``SPINDLE_SESSION_ID``, ``SPINDLE_MODEL`` and
``SPINDLE_SYSTEM_INSTRUCTION`` in its environment (empty when unknown), and, when the process
manager runs, ``SPINDLE_MCP_SERVERS``: a JSON list of ``{"name", "url", "bearer_token"}`` (its
thread's own token), the MCP config the other CLIs get through their own mechanisms.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

import trio

from threadspindle.agents.base.adapter import AgentAdapter, AgentStartError
from threadspindle.agents.base.launch import TURN_STDOUT_BYTES
from threadspindle.agents.base.options import AgentOptions
from threadspindle.agents.base.parsing import AgentStatistics
from threadspindle.agents.base.process import spawn_agent
from threadspindle.agents.command.launch import command_argv, launch_spec
from threadspindle.agents.command.parser import CommandLineParser
from threadspindle.effects.process import ManagedProcess
from threadspindle.runtime.core.agent_events import (
    AgentEvent,
    SessionStarted,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent
from threadspindle.runtime.core.guards import usable_session_id
from threadspindle.runtime.live.ports import EmitEvent, StampedEvent

__all__ = ["CommandAdapter"]


class CommandAdapter(AgentAdapter):
    name = "command"

    def __init__(self, options: AgentOptions) -> None:
        super().__init__(options)
        self.parser = CommandLineParser()
        self.run_id: str | None = None
        self.session_id: str | None = None
        self.processes_started = 0
        self._emit: EmitEvent | None = None
        self._start: StartAgent | None = None
        self._proc: ManagedProcess | None = None
        self._interrupted: set[str] = set()
        self._prompts_in, self._prompts_out = trio.open_memory_channel[PromptAgent](16)

    async def serve(
        self, start: StartAgent, emit: EmitEvent, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        try:
            argv = command_argv(self.options)
        except ValueError as exc:
            raise AgentStartError(str(exc)) from exc
        if shutil.which(argv[0]) is None:
            raise AgentStartError(f"command not found: {argv[0]!r}")
        self._emit, self._start = emit, start
        self.session_id = start.session_id
        task_status.started()
        async with self._prompts_out:
            async for prompt in self._prompts_out:
                self.run_id = prompt.run_id
                if prompt.run_id in self._interrupted:  # interrupted before it started
                    await self._send(TurnAborted(reason="interrupted"))
                    continue
                await self._run_turn(prompt)

    async def _run_turn(self, prompt: PromptAgent) -> None:
        assert self._start is not None
        workdir = prompt.workdir or self._start.workdir
        began = time.monotonic()
        self.parser.result = {}
        try:
            spec = launch_spec(self.options, prompt, workdir=workdir, session_id=self.session_id)
            proc = await spawn_agent(spec, stdout_bytes=TURN_STDOUT_BYTES)
        except OSError as exc:
            await self._send(TurnAborted(reason=f"the command could not start: {exc}"))
            return
        self._proc = proc
        self.processes_started += 1
        async with trio.open_nursery() as nursery:
            nursery.start_soon(proc.pump_stderr)
            nursery.start_soon(proc.feed_stdin, prompt.text)
            async for line in proc.stdout_lines():
                for event in self.parser.feed(line).events:
                    await self._send(event)
            code = await proc.wait()
            nursery.cancel_scope.cancel()
        self._proc = None
        tail = "\n".join(proc.stderr_tail)[-2000:]
        if prompt.run_id in self._interrupted:
            await self._send(TurnAborted(reason="interrupted", exit_code=code, stderr_tail=tail))
        elif code == 0:
            details = {"session_id": self.session_id, **self.parser.result}
            details.setdefault("duration_ms", int((time.monotonic() - began) * 1000))
            await self._send(TurnCompleted(**details))
        else:
            await self._send(
                TurnAborted(reason="the command failed", exit_code=code, stderr_tail=tail)
            )

    async def _send(self, event: AgentEvent) -> None:
        if isinstance(event, SessionStarted) and usable_session_id(event.session_id):
            # One with a NUL could never be handed back (SPINDLE_SESSION_ID): the core
            # ignores it too, and the next turn starts without one.
            self.session_id = event.session_id
        assert self._emit is not None
        await self._emit(StampedEvent(self.run_id, self.session_id, event))

    async def prompt(self, prompt: PromptAgent) -> None:
        await self._prompts_in.send(prompt)

    async def interrupt(self, run_id: str) -> None:
        self._interrupted.add(run_id)
        if self.run_id == run_id and self._proc is not None:
            await self._proc.stop(grace=self.options.stop_grace_s)

    async def answer_permission(self, request_id: str, allow: bool) -> None:
        return  # a plain command has no permission protocol

    async def answer_question(self, request_id: str, answer: str | None) -> None:
        return

    async def stop(self) -> None:
        await self._prompts_in.aclose()
        if self._proc is not None:
            if self.run_id is not None:
                self._interrupted.add(self.run_id)
            await self._proc.stop(grace=self.options.stop_grace_s)

    def statistics(self) -> AgentStatistics:
        return self.parser.stats.snapshot()

"""Codex's per-turn fall-back (``AgentOptions.per_turn``): one ``codex exec --json`` process
per prompt, resuming the thread's session, its lines read by ``ExecParser``.

``ExecTurnsMixin`` is that part of ``CodexAdapter`` (``adapter.py``, which keeps the state).
Turns run one at a time (the adapter's turn lock), in prompt order; a prompt interrupted
before its process started never starts one. ``codex exec`` has no in-band interrupt: an
interrupt is SIGINT (codex records ``turn_aborted`` and exits 1), and an exit without the
turn's end ends the run with ``TurnAborted``.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Any

import trio

from threadspindle.agents.base.adapter import AgentAdapter
from threadspindle.agents.base.parsing import ParserStats
from threadspindle.agents.base.process import spawn_agent
from threadspindle.agents.codex.exec_parser import ExecParser
from threadspindle.agents.codex.launch import ensure_codex_home, launch_spec, turn_text
from threadspindle.effects.process import ManagedProcess
from threadspindle.effects.process_tree import ProcessTree
from threadspindle.runtime.core.agent_events import (
    AgentError,
    AgentEvent,
    SessionStarted,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent

__all__ = ["ExecTurnsMixin"]


class ExecTurnsMixin(AgentAdapter):
    """The per-turn half of ``CodexAdapter``. What it uses of the adapter is declared here
    and kept by the adapter (``__init__``)."""

    sandbox: str
    _tree: ProcessTree
    _exec_stats: ParserStats
    _thread_id: str | None
    _model: str | None
    _ready: trio.Event
    _gone: trio.Event
    _run_id: str | None
    _turn_lock: trio.Lock
    _announced: bool
    _start: StartAgent | None
    _turn_nursery: trio.Nursery | None
    _exec_proc: ManagedProcess | None
    _exec_interrupted: bool
    _exec_run_id: str | None
    _exec_waiting: set[str]
    _exec_cancelled: set[str]

    if TYPE_CHECKING:  # implemented by CodexAdapter (codex/adapter.py)

        async def _send(self, run_id: str | None, event: AgentEvent) -> None: ...

        def _stderr_tail(self, proc: ManagedProcess | None) -> str: ...

    async def _serve_per_turn(self, task_status: Any) -> None:
        async with trio.open_nursery() as nursery:
            self._turn_nursery = nursery
            self._ready.set()
            task_status.started()
            await self._gone.wait()
            nursery.cancel_scope.cancel()

    async def _prompt_per_turn(self, prompt: PromptAgent) -> None:
        self._run_id = prompt.run_id
        self._announced = True  # codex exec announces its thread in every turn
        if self._turn_nursery is None or self._gone.is_set():
            await self._send(prompt.run_id, TurnAborted(reason="codex is not running"))
            return
        self._exec_waiting.add(prompt.run_id)
        self._turn_nursery.start_soon(self._exec_turn, prompt)

    async def _exec_turn(self, prompt: PromptAgent) -> None:
        assert self._start is not None
        async with self._turn_lock:
            self._exec_waiting.discard(prompt.run_id)
            if prompt.run_id in self._exec_cancelled:
                self._exec_cancelled.discard(prompt.run_id)
                await self._send(prompt.run_id, TurnAborted(reason="interrupted"))
                return
            self._exec_run_id = prompt.run_id
            self._exec_interrupted = False
            parser = ExecParser()
            if prompt.model:
                self._model = prompt.model
            parser.model = self._model
            instruction = (
                prompt.system_instruction
                or self._start.system_instruction
                or self.options.system_instruction
            )
            spec = launch_spec(
                self.options,
                workdir=prompt.workdir,
                per_turn=True,
                session_id=self._thread_id or prompt.session_id,
                model=self._model,
                system_instruction=instruction,
                sandbox=self.sandbox,
            )
            t0 = trio.current_time()
            try:
                ensure_codex_home(self.options)
                proc = await spawn_agent(spec)
            except OSError as exc:
                await self._send(prompt.run_id, TurnAborted(reason=f"cannot start codex: {exc}"))
                return
            self._exec_proc = proc
            self._tree.sample(proc.pid)
            if self._exec_interrupted:
                proc.signal(signal.SIGINT)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(proc.pump_stderr)
                    try:
                        await proc.write_line(turn_text(prompt.text, prompt.attachments))
                        await proc.close_stdin()
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        pass
                    async for line in proc.stdout_lines():
                        for event in parser.feed(line).events:
                            if isinstance(event, SessionStarted):
                                self._thread_id = event.session_id
                                self._tree.sample(proc.pid)
                            if isinstance(event, TurnCompleted):
                                ms = int((trio.current_time() - t0) * 1000)
                                event = event.model_copy(update={"duration_ms": ms})
                            await self._send(prompt.run_id, event)
                code = await proc.wait()
                if not parser.ended and parser.held_error:
                    await self._send(prompt.run_id, AgentError(message=parser.held_error))
                if not parser.ended:
                    reason = "interrupted" if self._exec_interrupted else "codex exited"
                    await self._send(
                        prompt.run_id,
                        TurnAborted(
                            reason=reason, exit_code=code, stderr_tail=self._stderr_tail(proc)
                        ),
                    )
            finally:
                self._exec_stats.add(parser.stats)
                self._exec_proc = None
                self._exec_run_id = None
                with trio.CancelScope(shield=True):
                    await proc.stop(grace=self.options.stop_grace_s)
                    await self._tree.terminate(grace=self.options.stop_grace_s)

    async def _interrupt_per_turn(self, run_id: str) -> None:
        proc = self._exec_proc
        if self._exec_run_id == run_id and proc is None:
            self._exec_interrupted = True  # being spawned: signalled as soon as it exists
            return
        if proc is None or self._exec_run_id != run_id:
            if run_id in self._exec_waiting:
                self._exec_cancelled.add(run_id)  # not started yet: it never will be
            return
        # codex exec has no in-band interrupt: SIGINT makes it record turn_aborted and exit 1.
        self._exec_interrupted = True
        proc.signal(signal.SIGINT)

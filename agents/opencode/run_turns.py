"""opencode's per-turn fall-back (``AgentOptions.per_turn``): one ``opencode run --format
json [-s <session>]`` per prompt, its lines read by ``OpencodeRunParser``.

``RunTurnsMixin`` is that part of ``OpencodeAdapter`` (``adapter.py``, which keeps the state
and starts each turn from ``prompt``). The thread's MCP servers go into a private config
file (0600, private temp dir, removed after the last turn) named by ``OPENCODE_CONFIG``,
which opencode merges over the user's config; no token is on a command line. ``run`` has no
in-band interrupt (the adapter stops the process) and auto-rejects permission requests; a
process that ends without finishing the turn ends it with ``TurnAborted``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import trio

from threadspindle.agents.base.adapter import AgentAdapter
from threadspindle.agents.base.launch import TURN_STDOUT_BYTES, PrivateDir, prompt_text
from threadspindle.agents.base.parsing import ParserStats
from threadspindle.agents.base.process import spawn_agent
from threadspindle.agents.opencode.launch import launch_env, private_config, run_spec
from threadspindle.agents.opencode.run_parser import OpencodeRunParser
from threadspindle.effects.process import ManagedProcess
from threadspindle.runtime.core.agent_events import AgentEvent, SessionStarted, TurnAborted
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent

__all__ = ["RunTurnsMixin"]


class RunTurnsMixin(AgentAdapter):
    """The per-turn half of ``OpencodeAdapter``. What it uses of the adapter is declared
    here and kept by the adapter (``__init__``)."""

    _stats: ParserStats
    _session_id: str | None
    _aborting_run: str | None
    _turn_proc: ManagedProcess | None
    _turn_done: trio.Event | None
    _turn_env: dict[str, str]

    if TYPE_CHECKING:  # implemented by OpencodeAdapter (opencode/adapter.py)

        async def _emit_event(self, event: AgentEvent) -> None: ...

    async def _serve_per_turn(self, start: StartAgent, task_status: Any) -> None:
        self._session_id = start.session_id
        config = private_config(self.options)
        config_dir = None
        self._turn_env = launch_env(self.options)
        try:
            if config:
                config_dir = PrivateDir("spindle-opencode-")
                path = config_dir.write("opencode.json", json.dumps(config))
                self._turn_env["OPENCODE_CONFIG"] = path
            task_status.started()
            if start.session_id:
                await self._emit_event(
                    SessionStarted(session_id=start.session_id, model=start.model)
                )
            await trio.sleep_forever()
        finally:
            if config_dir is not None:
                with trio.CancelScope(shield=True):
                    if self._turn_done is not None:
                        with trio.move_on_after(self.options.stop_grace_s * 3):
                            await self._turn_done.wait()
                config_dir.remove()

    async def _run_turn(self, prompt: PromptAgent, done: trio.Event) -> None:
        parser = OpencodeRunParser(self._stats)
        system = prompt.system_instruction or self.options.system_instruction
        first = not (prompt.session_id or self._session_id)
        # `run` has no flag for the system instruction: the session's first prompt says it.
        text = prompt_text(
            prompt.text, prompt.attachments, system_instruction=system if first else None
        )
        spec = run_spec(
            self.options,
            text,
            workdir=prompt.workdir,
            session_id=prompt.session_id or self._session_id,
            model=prompt.model or self.options.model,
            env=self._turn_env or launch_env(self.options),
        )
        try:
            proc = await spawn_agent(spec, stdin=False, stdout_bytes=TURN_STDOUT_BYTES)
        except OSError as exc:
            await self._emit_event(TurnAborted(reason=f"cannot start opencode: {exc}"))
            done.set()
            return
        self._turn_proc = proc
        try:
            if self._aborting_run == prompt.run_id:
                # Interrupted while the process was being spawned.
                await proc.stop(grace=self.options.stop_grace_s)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(proc.pump_stderr)
                async for line in proc.stdout_lines():
                    for event in parser.feed(line).events:
                        if isinstance(event, SessionStarted):
                            self._session_id = event.session_id
                        await self._emit_event(event)
                code = await proc.wait()
                with trio.move_on_after(1.0):
                    await trio.sleep(0)  # let stderr drain a little
                nursery.cancel_scope.cancel()
            if not parser.completed:
                reason = "interrupted" if self._aborting_run == prompt.run_id else parser.error
                await self._emit_event(
                    TurnAborted(
                        reason=reason or f"opencode exited ({code}) without finishing the turn",
                        exit_code=code,
                        stderr_tail="\n".join(list(proc.stderr_tail)[-10:]),
                    )
                )
        finally:
            with trio.CancelScope(shield=True):
                await proc.stop(grace=self.options.stop_grace_s)
            self._turn_proc = None
            done.set()

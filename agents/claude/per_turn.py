"""Claude Code's per-turn fall-back (``AgentOptions.per_turn``): one ``claude -p`` process
per prompt, resuming the thread's last session, closed after its ``result``.

``PerTurnMixin`` is that part of ``ClaudeAdapter`` (``adapter.py``, which keeps the state
and the parts both modes share: spawning, the ``initialize`` handshake, the stdout reader,
the end of a process). Prompts run one at a time, in order, each process started once the
previous one is gone (so its exit is never taken for the next turn's); a prompt interrupted
before its process started never starts one. A turn whose process cannot start ends with
``TurnAborted`` and the next prompt tries again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from threadspindle.agents.base.adapter import AgentAdapter, AgentStartError
from threadspindle.agents.base.jsonrpc import RpcPeer
from threadspindle.effects.process import ManagedProcess
from threadspindle.runtime.core.agent_events import AgentEvent, TurnAborted
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent

__all__ = ["PerTurnMixin"]


class PerTurnMixin(AgentAdapter):
    """The per-turn half of ``ClaudeAdapter``. What it uses of the adapter is declared here
    and kept by the adapter (``__init__``)."""

    session_id: str | None
    unknown_sessions: set[str]
    _proc: ManagedProcess | None
    _turn_done: trio.Event
    _stopping: bool
    _queued_runs: set[str]
    _prompts_in: trio.MemorySendChannel[PromptAgent] | None
    _prompts_out: trio.MemoryReceiveChannel[PromptAgent] | None

    if TYPE_CHECKING:  # implemented by ClaudeAdapter (claude/adapter.py)

        async def _emit_event(self, event: AgentEvent, run_id: str | None = None) -> None: ...

        def _forget_unknown_session(self, session: str | None, not_ready: str) -> bool: ...

        async def _spawn(
            self,
            workdir: str,
            session_id: str | None,
            *,
            model: str | None = None,
            system_instruction: str | None = None,
        ) -> ManagedProcess: ...

        async def _attach(
            self, nursery: trio.Nursery, proc: ManagedProcess
        ) -> tuple[RpcPeer, trio.Event, str | None]: ...

        async def _send_prompt(self, peer: RpcPeer, prompt: PromptAgent) -> None: ...

        async def _wait_exit(self, proc: ManagedProcess, reader_done: trio.Event) -> None: ...

    async def _serve_per_turn(self, start: StartAgent, task_status: Any) -> None:
        self._prompts_in, self._prompts_out = trio.open_memory_channel[PromptAgent](16)
        task_status.started()
        async with self._prompts_out:
            async for prompt in self._prompts_out:
                if prompt.run_id not in self._queued_runs:  # interrupted before it started
                    await self._emit_event(TurnAborted(reason="interrupted"), prompt.run_id)
                    continue
                self._queued_runs.discard(prompt.run_id)
                session = self.session_id or prompt.session_id
                if session in self.unknown_sessions:
                    session = None
                try:
                    proc, not_ready = await self._one_turn(start, prompt, session)
                    retry = not_ready is not None and not self._stopping
                    if retry and self._forget_unknown_session(session, not_ready or ""):
                        # No such session: this same prompt in a new one (told the thread).
                        proc, not_ready = await self._one_turn(start, prompt, None)
                except (AgentStartError, OSError) as exc:
                    # This turn cannot run; the next prompt may (a workdir comes back ...).
                    await self._emit_event(TurnAborted(reason=str(exc)), prompt.run_id)
                    self._proc = None
                    continue
                if not_ready is not None:
                    aborted = TurnAborted(reason=not_ready, exit_code=proc.returncode)
                    await self._emit_event(aborted, prompt.run_id)
                self._proc = None
                if self._stopping:
                    return

    async def _one_turn(
        self, start: StartAgent, prompt: PromptAgent, session: str | None
    ) -> tuple[ManagedProcess, str | None]:
        """Per-turn mode: one process for ``prompt``, to its end. Returns the process and
        why it never got ready (None when it ran the turn); a process that never got ready
        is stopped here, so the caller may start another."""
        proc = await self._spawn(
            prompt.workdir or start.workdir,
            session,
            model=prompt.model,
            system_instruction=prompt.system_instruction,
        )
        async with trio.open_nursery() as nursery:
            peer, reader_done, not_ready = await self._attach(nursery, proc)
            if not_ready is None:
                await self._send_prompt(peer, prompt)
                nursery.start_soon(self._close_after_turn, proc)
                await self._wait_exit(proc, reader_done)
            nursery.cancel_scope.cancel()
        if not_ready is not None:
            with trio.CancelScope(shield=True):
                await proc.stop(grace=self.options.stop_grace_s)
        return proc, not_ready

    async def _close_after_turn(self, proc: ManagedProcess) -> None:
        """Per-turn mode: the turn is over once ``result`` came; closing stdin ends it."""
        await self._turn_done.wait()
        try:
            await proc.close_stdin()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass

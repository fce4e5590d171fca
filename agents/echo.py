"""The built-in ``echo`` agent: a clearly labelled demo that needs no CLI and no account.

It answers each prompt by echoing it back slowly, word by word, so queueing, interrupting
and aborting can be tried by hand; it echoes the prompt as a CLI agent gets it, so a file
sent with it shows as its path (or, a small text file, its text). A prompt containing
``tool`` makes it simulate a tool call first; one containing ``ask`` makes it ask for
permission. It runs in-process (no child process), but behaves like a long-lived agent:
one ``serve`` for many turns, in-band interrupt, session ids, a ``TurnCompleted`` at the
end of each turn. It reads no CLI output, so it has no parser, and its ``statistics()``
stay at zero.
"""

from __future__ import annotations

import itertools

import trio

from threadspindle.agents.base.adapter import AgentAdapter
from threadspindle.agents.base.launch import prompt_text
from threadspindle.agents.base.options import AgentOptions
from threadspindle.runtime.core import agent_events as E
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent
from threadspindle.runtime.live.ports import EmitEvent, StampedEvent

__all__ = ["Adapter", "EchoAdapter"]

DEMO_LABEL = "echo (demo agent)"
_sessions = itertools.count(1)


class EchoAdapter(AgentAdapter):
    name = "echo"

    def __init__(self, options: AgentOptions, *, word_delay_s: float = 0.15) -> None:
        super().__init__(options)
        self.word_delay_s = word_delay_s
        self._session_id: str | None = None
        self._emit: EmitEvent | None = None
        self._prompts: (
            tuple[trio.MemorySendChannel[PromptAgent], trio.MemoryReceiveChannel[PromptAgent]]
            | None
        ) = None
        self._turn_scope: trio.CancelScope | None = None
        self._run_id: str | None = None
        self._permission: trio.Event | None = None
        self._allowed = False
        self._stop = trio.Event()

    async def serve(self, start: StartAgent, emit: EmitEvent, task_status: object) -> None:
        self._session_id = start.session_id or f"echo-{next(_sessions)}"
        self._emit = emit
        send, receive = trio.open_memory_channel[PromptAgent](16)
        self._prompts = (send, receive)
        task_status.started()  # type: ignore[attr-defined]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._wait_stop, nursery.cancel_scope)
            async for prompt in receive:
                await self._turn(prompt)

    async def _wait_stop(self, scope: trio.CancelScope) -> None:
        await self._stop.wait()
        scope.cancel()

    async def _send(self, event: E.AgentEvent) -> None:
        assert self._emit is not None
        await self._emit(StampedEvent(self._run_id, self._session_id, event))

    async def _turn(self, prompt: PromptAgent) -> None:
        self._run_id = prompt.run_id
        started = trio.current_time()
        await self._send(E.SessionStarted(session_id=self._session_id or "", model=DEMO_LABEL))
        with trio.CancelScope() as scope:
            self._turn_scope = scope
            lowered = prompt.text.lower()
            denied = False
            if "ask" in lowered.split():
                self._permission = trio.Event()
                await self._send(
                    E.PermissionRequested(
                        request_id=f"{prompt.run_id}-perm", tool="Echo", detail="May I echo this?"
                    )
                )
                await self._permission.wait()
                if not self._allowed:
                    await self._send(E.TextDelta(text="(permission denied: not echoing)"))
                    words: list[str] = []
                    denied = True
                else:
                    words = prompt_text(prompt.text, prompt.attachments).split()
            else:
                words = prompt_text(prompt.text, prompt.attachments).split()
            if "tool" in lowered.split() and words:
                tool_id = f"{prompt.run_id}-tool"
                await self._send(
                    E.ToolStarted(
                        tool_id=tool_id,
                        name="echo_tool",
                        display_name="Echo Tool",
                        input_summary=f"{len(words)} words",
                    )
                )
                await trio.sleep(self.word_delay_s * 3)
                await self._send(
                    E.ToolFinished(tool_id=tool_id, result=f"counted {len(words)} words")
                )
            if not words and not denied:  # (a refusal said so already)
                words = ["(empty prompt)"]
            for i, word in enumerate(words):
                await self._send(E.TextDelta(text=("" if i == 0 else " ") + word))
                await trio.sleep(self.word_delay_s)
        self._turn_scope = None
        if scope.cancelled_caught:
            await self._send(E.TurnAborted(reason="interrupted"))
            return
        elapsed = int((trio.current_time() - started) * 1000)
        await self._send(
            E.TurnCompleted(
                session_id=self._session_id, cost_usd=0.0, duration_ms=elapsed, model=DEMO_LABEL
            )
        )

    async def prompt(self, prompt: PromptAgent) -> None:
        if self._prompts is None:
            raise RuntimeError("the echo agent is not started")
        await self._prompts[0].send(prompt)

    async def interrupt(self, run_id: str) -> None:
        if self._turn_scope is not None and run_id == self._run_id:
            self._turn_scope.cancel()

    async def answer_permission(self, request_id: str, allow: bool) -> None:
        if self._permission is not None:
            self._allowed = allow
            self._permission.set()

    async def answer_question(self, request_id: str, answer: str | None) -> None:
        return  # the echo agent asks no questions

    async def stop(self) -> None:
        if self._turn_scope is not None:
            self._turn_scope.cancel()
        self._stop.set()


Adapter = EchoAdapter

"""Steering Claude Code (long-lived mode): a message written into the running turn, and how
the CLI's replay of it says it was taken.

``SteeringMixin`` is that part of ``ClaudeAdapter`` (``adapter.py``, which keeps the state
and resets it for each new process). A steer is another user line written while the turn
runs; Claude Code takes it at its next model request, or, when the turn ends first, runs it
in a turn of its own right after, which continues the same run (its end carries what the
turns before it cost). ``--replay-user-messages`` echoes each line the CLI took: that echo
is the steer's ``SteerTaken``. After an interrupt the steers' own turn is interrupted too,
what it says is dropped, it ends the run as interrupted, and the steers are refused (the core
sends them as prompts).
"""

from __future__ import annotations

import collections
import json
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from threadspindle.agents.base.adapter import AgentAdapter
from threadspindle.agents.base.jsonrpc import RpcPeer
from threadspindle.agents.base.launch import prompt_text
from threadspindle.agents.claude.launch import prompt_message
from threadspindle.effects.process import ManagedProcess
from threadspindle.runtime.core.agent_events import (
    AgentEvent,
    SessionStarted,
    SteerRefused,
    SteerTaken,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import SteerAgent

__all__ = ["SteeringMixin"]


class SteeringMixin(AgentAdapter):
    """The steering half of ``ClaudeAdapter``. What it uses of the adapter is declared here
    and kept by the adapter (``__init__``, ``_spawn``)."""

    current_run: str | None
    _proc: ManagedProcess | None
    _peer: RpcPeer | None
    _unreplayed: collections.deque[tuple[str | None, str]]
    _steers_open: dict[str, str]
    _refused_steers: set[str]
    _interrupt_next_turn: bool
    _discarding: bool
    _carried: TurnCompleted | None

    if TYPE_CHECKING:  # implemented by ClaudeAdapter (claude/adapter.py)

        async def _emit_event(self, event: AgentEvent, run_id: str | None = None) -> None: ...

        async def _control(self, sending: Awaitable[object]) -> None: ...

    async def steer(self, steer: SteerAgent) -> None:
        """Write the message as a user line while the turn runs: Claude Code takes it into
        the turn at its next model request (as "The user sent a new message while you were
        working: ..."), or, when the turn ends first, runs it in a turn of its own right
        after; either way the adapter keeps one run, and the CLI's replay of the line
        (``--replay-user-messages``) says it was taken."""
        if self.options.per_turn:
            await super().steer(steer)
        proc, peer = self._proc, self._peer
        if steer.run_id != self.current_run or proc is None or peer is None:
            refused = SteerRefused(steer_id=steer.steer_id, reason="no turn")
            await self._emit_event(refused, steer.run_id)
            return
        if proc.returncode is not None:
            return  # the exit ends the turn: the core puts the text back in the queue
        text = prompt_text(steer.text, steer.attachments)
        self._unreplayed.append((steer.steer_id, text))
        self._steers_open[steer.steer_id] = steer.run_id
        await self._control(peer.send(prompt_message(text, steer.attachments)))

    async def _replayed(self, line: str) -> None:
        """The CLI replayed a user line it took into its transcript: a steer is taken."""
        try:
            obj = json.loads(line)
            content = obj["message"]["content"]
            text = next(p["text"] for p in content if p.get("type") == "text")
        except (ValueError, KeyError, TypeError, StopIteration, AttributeError):
            return
        if obj.get("isReplay") is not True:
            return
        found = next((i for i, (_, w) in enumerate(self._unreplayed) if w == text), None)
        if found is None:
            return
        steer_id = self._unreplayed[found][0]
        for _ in range(found + 1):  # earlier lines were taken without a replay
            self._unreplayed.popleft()
        if steer_id is None:
            return
        run_id = self._steers_open.pop(steer_id, None)
        if run_id is not None and steer_id not in self._refused_steers:
            await self._emit_event(SteerTaken(steer_id=steer_id), run_id)

    async def _continue_turn(self, events: list[AgentEvent]) -> list[AgentEvent]:
        """The turn ended with steers the CLI has not taken yet: it runs them in a turn of
        its own next, which continues this run. After an interrupt that turn is
        interrupted too, and the steers are refused (the core sends them as prompts)."""
        ends = [e for e in events if isinstance(e, TurnCompleted | TurnAborted)]
        rest: list[AgentEvent] = [
            e for e in events if not isinstance(e, TurnCompleted | TurnAborted)
        ]
        aborted = any(isinstance(e, TurnAborted) for e in ends)
        if aborted:
            self._interrupt_next_turn = True
            self._discarding = True
            for steer_id in list(self._steers_open):
                self._refused_steers.add(steer_id)
                del self._steers_open[steer_id]
                refused = SteerRefused(steer_id=steer_id, reason="the turn was interrupted")
                rest.append(refused)
        else:
            done = next((e for e in ends if isinstance(e, TurnCompleted)), None)
            if done is not None:
                merged = self._merge_carried(done)
                self._carried = merged if isinstance(merged, TurnCompleted) else done
        return rest

    def _discard_continuation(self, events: list[AgentEvent], ended: bool) -> list[AgentEvent]:
        """The steers' own turn after an interrupt: the user stopped the run, so nothing it
        says is shown (its steers were refused; the core sends them again as prompts), and
        it ends the run as interrupted even when it finished first. The interrupt sent at
        its start can come too late for a quick answer: under load the run then ended
        "completed", with the steer answered in it and again as the next prompt."""
        kept: list[AgentEvent] = [e for e in events if isinstance(e, SessionStarted)]
        if ended:
            self._discarding = False
            self._carried = None
            kept.append(TurnAborted(reason="interrupted"))
        return kept

    def _merge_carried(self, event: AgentEvent) -> AgentEvent:
        """The run's end carries what the turns before it (continued by steers) cost."""
        carried = self._carried
        if carried is None or not isinstance(event, TurnCompleted):
            return event
        self._carried = None
        cost = None
        if event.cost_usd is not None or carried.cost_usd is not None:
            cost = (event.cost_usd or 0.0) + (carried.cost_usd or 0.0)
        duration = None
        if event.duration_ms is not None or carried.duration_ms is not None:
            duration = (event.duration_ms or 0) + (carried.duration_ms or 0)
        return event.model_copy(update={"cost_usd": cost, "duration_ms": duration})

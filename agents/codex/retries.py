"""Codex's model-call retries, capped at ``AgentOptions.max_retries`` (pure).

Codex retries a failed model stream by itself ("Reconnecting... 2/5", 5 by default, then
as many again over HTTPS when its WebSocket transport failed: about 30 s with the model API
down). The built-in ``openai`` provider's retry counts cannot be configured (codex refuses
``model_providers.openai.*``), so the adapter caps them the same way for every provider:
``RetryCap`` numbers each retry of a run (``attempt`` of ``max_retries``); the one past the
cap is not shown, and the adapter interrupts the turn in-band instead; the turn's
interrupted end then becomes a failed ``TurnCompleted`` saying why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from threadspindle.runtime.core.agent_events import (
    AgentError,
    AgentEvent,
    TurnAborted,
    TurnCompleted,
)

__all__ = ["CapDecision", "RetryCap"]

_RECONNECTING = re.compile(r"^Reconnecting\.\.\.\s*\d+/\d+\s*")


@dataclass(frozen=True, slots=True)
class CapDecision:
    event: AgentEvent | None  # what to send for the run (None: nothing)
    interrupt: bool = False  # stop the run's turn now: it retried too often


@dataclass
class RetryCap:
    max_retries: int
    _retries: dict[str, int] = field(default_factory=dict)  # run id -> retries seen
    _gave_up: dict[str, str] = field(default_factory=dict)  # run id -> why

    def on_event(
        self, run_id: str, event: AgentEvent, *, session_id: str | None, model: str | None
    ) -> CapDecision:
        if isinstance(event, AgentError) and event.retryable:
            n = self._retries[run_id] = self._retries.get(run_id, 0) + 1
            if n <= self.max_retries:
                update = {"attempt": n, "max_retries": self.max_retries}
                return CapDecision(event.model_copy(update=update))
            if run_id in self._gave_up:
                return CapDecision(None)
            cause = _RECONNECTING.sub("", event.message).strip().strip("()") or event.message
            self._gave_up[run_id] = (
                f"the model API failed; gave up after {self.max_retries} retries: {cause}"
            )
            return CapDecision(None, interrupt=True)
        if isinstance(event, TurnCompleted | TurnAborted):
            self._retries.pop(run_id, None)
            why = self._gave_up.pop(run_id, None)
            if why is not None and isinstance(event, TurnAborted):
                # The interrupt was ours: the turn failed, it was not stopped by the user.
                failed = TurnCompleted(session_id=session_id, model=model, is_error=True, error=why)
                return CapDecision(failed)
        return CapDecision(event)

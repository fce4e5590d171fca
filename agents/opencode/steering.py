"""Which steered messages the running opencode loop has taken (pure: bus events in, steer ids
out).

A steer is ``POST /session/{id}/prompt_async`` while the session is busy: opencode stores it
as a user message at once (``message.updated`` role ``user``, then its text part) and the
running loop picks it up at its next step, whose assistant message has the steer's message
as ``parentID`` (after a tool step: the next model call; after a text step: one more step
answering it); the busy period ends with one ``session.idle``. So a steer is *taken* when an
assistant message names it as parent. Steers are matched to their user messages by text, in
the order they were sent (``prompt_async`` answers 204 with no id).

Invariant: each steer id is reported taken at most once; ``end_turn`` forgets the rest (the
core puts an unanswered steer back at the head of its queue).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["SteerTracker"]


@dataclass
class _Sent:
    steer_id: str
    text: str
    message_id: str | None = None  # the user message opencode stored it as


class SteerTracker:
    def __init__(self) -> None:
        self._sent: list[_Sent] = []
        self._user_messages: set[str] = set()

    @property
    def pending(self) -> tuple[str, ...]:
        """Steer ids sent and not taken yet."""
        return tuple(s.steer_id for s in self._sent)

    def sent(self, steer_id: str, text: str) -> None:
        self._sent.append(_Sent(steer_id, text))

    def withdraw(self, steer_id: str) -> None:
        """The request failed: opencode has nothing of it."""
        self._sent = [s for s in self._sent if s.steer_id != steer_id]

    def feed(self, event: dict[str, Any]) -> list[str]:
        """The steers ``event`` shows taken (usually none)."""
        if not self._sent:
            return []
        kind = event.get("type")
        props = event.get("properties")
        if not isinstance(props, dict):
            return []
        if kind == "message.updated":
            info = props.get("info")
            if not isinstance(info, dict):
                return []
            if info.get("role") == "user" and isinstance(info.get("id"), str):
                self._user_messages.add(info["id"])
                return []
            parent = info.get("parentID")
            if info.get("role") == "assistant" and isinstance(parent, str):
                taken = [s.steer_id for s in self._sent if s.message_id == parent]
                self._sent = [s for s in self._sent if s.message_id != parent]
                return taken
            return []
        if kind == "message.part.updated":
            part = props.get("part")
            if not isinstance(part, dict) or part.get("type") != "text":
                return []
            mid = part.get("messageID")
            if mid not in self._user_messages or any(s.message_id == mid for s in self._sent):
                return []
            for sent in self._sent:
                if sent.message_id is None and sent.text == part.get("text"):
                    sent.message_id = mid
                    break
        return []

    def end_turn(self) -> tuple[str, ...]:
        """The busy period ended: the steers still pending (forgotten here)."""
        left = self.pending
        self._sent = []
        self._user_messages.clear()
        return left

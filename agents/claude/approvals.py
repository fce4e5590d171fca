"""Answers to Claude Code's permission prompts and questions (``can_use_tool`` control
requests), as ``control_response``s.

``ApprovalsMixin`` is that part of ``ClaudeAdapter`` (``adapter.py``). A tool use is allowed
with its original input, or denied with a message the model reads; ``AskUserQuestion``
arrives the same way and is allowed with the answer added to its input
(``updatedInput.answers``), or denied when dismissed. A request already answered, or asked
by a process that is gone, is not answered again.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from threadspindle.agents.base.adapter import AgentAdapter
from threadspindle.agents.base.jsonrpc import RpcPeer
from threadspindle.agents.claude.parser import (
    ASK_USER_QUESTION,
    ClaudeStreamParser,
    PendingControl,
)

__all__ = ["DENY_MESSAGE", "DISMISS_MESSAGE", "ApprovalsMixin"]

DENY_MESSAGE = "The user denied this tool use."
DISMISS_MESSAGE = "The user dismissed the question without answering."


def _question_answers(pending: PendingControl, answer: str) -> dict[str, Any]:
    """``AskUserQuestion`` is allowed with the answers added to its input, keyed by question."""
    answers: dict[str, str] = {}
    for q in pending.input.get("questions") or ():
        if isinstance(q, dict) and isinstance(q.get("question"), str):
            answers[q["question"]] = answer
    return {**pending.input, "answers": answers}


class ApprovalsMixin(AgentAdapter):
    """The answering half of ``ClaudeAdapter``. What it uses of the adapter is declared
    here and kept by the adapter (``__init__``, ``_spawn``)."""

    parser: ClaudeStreamParser
    _peer: RpcPeer | None

    if TYPE_CHECKING:  # implemented by ClaudeAdapter (claude/adapter.py)

        async def _control(self, sending: Awaitable[object]) -> None: ...

    async def answer_permission(self, request_id: str, allow: bool) -> None:
        pending = self.parser.take_request(request_id)
        if pending is None or self._peer is None:
            return  # already answered, or the process that asked is gone
        if allow:
            response = {"behavior": "allow", "updatedInput": pending.input}
        else:
            response = {"behavior": "deny", "message": DENY_MESSAGE}
        await self._control(self._peer.respond(request_id, response))

    async def answer_question(self, request_id: str, answer: str | None) -> None:
        pending = self.parser.take_request(request_id)
        if pending is None or self._peer is None:
            return
        if answer is None or pending.tool_name != ASK_USER_QUESTION:
            response: dict[str, Any] = {"behavior": "deny", "message": DISMISS_MESSAGE}
        else:
            response = {"behavior": "allow", "updatedInput": _question_answers(pending, answer)}
        await self._control(self._peer.respond(request_id, response))

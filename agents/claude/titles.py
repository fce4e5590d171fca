"""The session title of a Claude Code session, asked of the CLI itself.

Claude Code's stream-json output never carries a title (2.1.197: no ``summary`` or
``ai-title`` line on stdout; the interactive CLI writes ``ai-title`` lines to its session
file). Its SDK control protocol has the request: ``control_request generate_session_title
{description, persist}``; the CLI makes one model call with its own title prompt
("Generate a concise, sentence-case title (3-7 words) ...", JSON output) and answers
``control_response {title}`` (``null`` when the model's answer was no title, and, without a
model call, for a description under 10 characters: ``TITLE_MIN_CHARS``); ``persist``
writes the ``ai-title`` line, so ``claude --resume`` lists the session by it too. Recorded:
``tests/agents/fixtures/claude/claude-title.jsonl``.
"""

from __future__ import annotations

import trio

from threadspindle.agents.base.jsonrpc import RpcClosed, RpcPeer
from threadspindle.runtime.core.agent_events import AgentEvent, TurnCompleted

__all__ = [
    "TITLE_MIN_CHARS",
    "TITLE_SOURCE_CHARS",
    "TITLE_TIMEOUT_S",
    "SessionTitling",
    "ask_session_title",
]

TITLE_MIN_CHARS = 10  # the CLI titles nothing shorter (it answers null without asking)
TITLE_SOURCE_CHARS = 2000  # of the first prompts: what the title is made from
TITLE_TIMEOUT_S = 60.0


class SessionTitling:
    """When to ask: once per new session (a resumed one has its title), after a completed
    turn, from the first prompts joined until they reach ``TITLE_MIN_CHARS``."""

    def __init__(self, *, asked: bool = False) -> None:
        self.asked = asked
        self.source = ""

    def prompted(self, text: str) -> None:
        if len(self.source) < TITLE_MIN_CHARS:
            self.source = f"{self.source}\n{text}".strip()

    def due(self, events: list[AgentEvent]) -> str | None:
        """The description to ask with, if the turn that ``events`` end makes it time (it
        is then asked: never twice)."""
        done = any(isinstance(e, TurnCompleted) and not e.is_error for e in events)
        if self.asked or not done or len(self.source) < TITLE_MIN_CHARS:
            return None
        self.asked = True
        return self.source


async def ask_session_title(peer: RpcPeer, description: str) -> str | None:
    """The CLI's title for a session that began with ``description`` (None: no title, an
    error, no answer in time, or the process went away)."""
    params = {"description": description[:TITLE_SOURCE_CHARS], "persist": True}
    try:
        response = await peer.call("generate_session_title", params, timeout=TITLE_TIMEOUT_S)
    except (RpcClosed, trio.TooSlowError):
        return None
    result = response.result if isinstance(response.result, dict) else {}
    title = result.get("title")
    if response.error is not None or not isinstance(title, str) or not title.strip():
        return None
    return title.strip()

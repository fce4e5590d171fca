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

__all__ = ["TITLE_MIN_CHARS", "TITLE_SOURCE_CHARS", "TITLE_TIMEOUT_S", "ask_session_title"]

TITLE_MIN_CHARS = 10  # the CLI titles nothing shorter (it answers null without asking)
TITLE_SOURCE_CHARS = 2000  # of the first prompts: what the title is made from
TITLE_TIMEOUT_S = 60.0


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

"""Claude Code: one long-lived ``claude -p`` stream-json process per thread (docs/agents.md).

``launch.py`` (argv, environment, MCP config, the control framing; pure), ``parser.py``
(stream-json -> ``ParsedLine``; pure), ``adapter.py`` (the process and its turns),
``steering.py`` (steering a running turn), ``approvals.py`` (answers to permission prompts
and questions), ``per_turn.py`` (the per-turn fall-back), ``titles.py`` (the session's
title), ``sessions.py`` (past sessions from the CLI's store).
"""

from __future__ import annotations

from threadspindle.agents.claude.adapter import ClaudeAdapter
from threadspindle.agents.claude.sessions import list_conversations

__all__ = ["Adapter", "ClaudeAdapter", "list_conversations"]

Adapter = ClaudeAdapter

"""The Codex CLI: ``codex app-server`` (JSON-RPC over stdio) for a thread's whole life,
``codex exec --json`` per turn as the fall-back (docs/agents.md).

``launch.py`` (argv, environment, ``-c`` overrides, turn input; pure), ``parser.py``
(app-server JSON-RPC -> ``ParsedLine``; pure), ``exec_parser.py`` (``exec --json`` lines;
pure), ``retries.py`` (the model-retry cap; pure), ``adapter.py`` (the process and its
turns), ``app_server.py`` (the app-server's start and the reader of its output),
``exec_turns.py`` (the per-turn ``codex exec`` fall-back), ``shell_turn.py`` (a `!`
command's turn), ``sessions.py`` (past sessions from codex's store).
"""

from __future__ import annotations

from threadspindle.agents.codex.adapter import CodexAdapter
from threadspindle.agents.codex.sessions import list_conversations

__all__ = ["Adapter", "CodexAdapter", "list_conversations"]

Adapter = CodexAdapter

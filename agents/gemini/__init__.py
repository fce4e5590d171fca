"""The Gemini CLI: one long-lived ``gemini --acp`` process per thread (ACP v1, JSON-RPC 2.0
over stdio), ``gemini -p -o stream-json`` per turn as the fall-back (docs/agents.md).

``launch.py`` (argv, environment; pure), ``home.py`` (each thread's own settings home over
Spindle's shared session store, the same-minute guard), ``parser.py`` (ACP -> ``ParsedLine``;
pure), ``stream_parser.py`` (``-p`` lines; pure), ``retries.py`` (the CLI's retry notices),
``adapter.py`` (the process and its turns), ``sessions.py`` (past sessions).
"""

from __future__ import annotations

from threadspindle.agents.gemini.adapter import GeminiAdapter
from threadspindle.agents.gemini.sessions import list_conversations

__all__ = ["Adapter", "GeminiAdapter", "list_conversations"]

Adapter = GeminiAdapter

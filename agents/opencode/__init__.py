"""opencode: one session per thread on a shared ``opencode serve`` per project directory
(HTTP + SSE), ``opencode run --format json`` per turn as the fall-back (docs/agents.md).

``launch.py`` (environment, serve and run specs, MCP registrations, session rules, prompt
bodies; pure), ``parser.py`` (the event bus -> ``ParsedLine``; pure), ``run_parser.py``
(``run --format json`` lines; pure), ``server.py`` (the shared server: pool, password, the
event bus routed to each thread's session), ``adapter.py`` (one thread's session),
``session_setup.py`` (the session opened, its rules, the thread's MCP registrations),
``run_turns.py`` (the per-turn ``opencode run`` fall-back), ``steering.py`` (when a steer
was taken), ``sessions.py`` (past sessions).
"""

from __future__ import annotations

from threadspindle.agents.opencode.adapter import OpencodeAdapter
from threadspindle.agents.opencode.sessions import list_conversations

__all__ = ["Adapter", "OpencodeAdapter", "list_conversations"]

Adapter = OpencodeAdapter

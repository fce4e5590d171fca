"""The generic command: any program that reads a prompt on stdin and writes lines, one
process per turn (docs/agents.md).

``launch.py`` (argv and environment; pure), ``parser.py`` (stdout lines -> ``ParsedLine``;
pure), ``adapter.py`` (one process per turn). It keeps no sessions of its own to list.
"""

from __future__ import annotations

from threadspindle.agents.command.adapter import CommandAdapter

__all__ = ["Adapter", "CommandAdapter"]

Adapter = CommandAdapter

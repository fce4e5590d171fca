"""The agent adapters, looked up by name: one package per CLI (``agents/<name>/``: launch,
parser, adapter, sessions; on the shared base in ``agents/base/``), each exposing ``Adapter``
(and ``list_conversations`` when the CLI keeps sessions).

``ADAPTERS`` maps an agent name to its adapter class and imports the package only when the
name is first looked up, so a broken or slow adapter never stops the others from loading.
To add an agent: docs/architecture.md, "How to add an agent" (the package, one line in
``ADAPTER_MODULES``, and ``tests/agents/test_adapter_contract.py`` to pass).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

from threadspindle.agents.base import AgentAdapter

__all__ = [
    "ADAPTERS",
    "ADAPTER_MODULES",
    "UnknownAgent",
    "adapter_class",
    "known_agents",
    "list_conversations",
    "unknown_agent_message",
]

# agent name -> module that defines ``Adapter`` (one line per agent).
ADAPTER_MODULES: dict[str, str] = {
    "claude": "threadspindle.agents.claude",
    "codex": "threadspindle.agents.codex",
    "gemini": "threadspindle.agents.gemini",
    "opencode": "threadspindle.agents.opencode",
    "command": "threadspindle.agents.command",
    "echo": "threadspindle.agents.echo",
}


def known_agents() -> tuple[str, ...]:
    """Every agent name Spindle can drive, in ``ADAPTER_MODULES`` order."""
    return tuple(ADAPTER_MODULES)


def unknown_agent_message(name: str) -> str:
    """The one sentence for an agent name that is not known, naming those that are."""
    return f"unknown agent {name!r}: expected one of {', '.join(known_agents())}"


def check_agent(name: str) -> str:
    """``name``, if Spindle can drive it; else ``ValueError`` (``unknown_agent_message``).
    The validator of every settings model's ``agent`` field."""
    if name not in known_agents():
        raise ValueError(unknown_agent_message(name))
    return name


def check_agents(names: tuple[str, ...]) -> tuple[str, ...]:
    """``check_agent`` for each of ``names`` (an ``agents`` field)."""
    for name in names:
        check_agent(name)
    return names


class UnknownAgent(KeyError):
    """An agent name with no adapter; ``str()`` names the known ones (without the quotes
    ``KeyError`` would add)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown agent"


def adapter_class(name: str) -> type[AgentAdapter]:
    """The adapter class for ``name`` (``UnknownAgent``, a KeyError, for a name that is not
    in ``ADAPTER_MODULES``: only those modules are ever imported)."""
    module_name = ADAPTER_MODULES.get(name)
    if module_name is None:
        raise UnknownAgent(unknown_agent_message(name))
    module = importlib.import_module(module_name)
    adapter = getattr(module, "Adapter", None)
    if not (isinstance(adapter, type) and issubclass(adapter, AgentAdapter)):
        raise KeyError(f"{module_name} has no Adapter class")
    return adapter


class _LazyAdapters(Mapping[str, type[AgentAdapter]]):
    """``ADAPTERS[name]`` imports the adapter module on first use."""

    def __getitem__(self, name: str) -> type[AgentAdapter]:
        if name not in ADAPTER_MODULES:
            raise KeyError(name)
        return adapter_class(name)

    def __iter__(self) -> Iterator[str]:
        return iter(ADAPTER_MODULES)

    def __len__(self) -> int:
        return len(ADAPTER_MODULES)


ADAPTERS: Mapping[str, type[AgentAdapter]] = _LazyAdapters()


def list_conversations(agent: str, workdir: str, home: str | None = None) -> list[Any]:
    """Past sessions of ``agent`` for ``workdir`` from the CLI's own store, newest first
    (each with ``session_id``, ``title``, ``updated_at``, ``path``). Best effort: an agent
    without a listing, or a store that cannot be read, gives ``[]``."""
    module_name = ADAPTER_MODULES.get(agent)
    if module_name is None:
        return []
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return []
    lister = getattr(module, "list_conversations", None)
    if lister is None:
        return []
    return list(lister(workdir, home=home))

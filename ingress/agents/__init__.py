"""The agent adapters, looked up by name: one module per CLI, each exposing ``Adapter``.

``ADAPTERS`` maps an agent name to its adapter class and imports the module only when the
name is first looked up, so a broken or slow adapter module never stops the others from
loading. To add an agent: write ``ingress/agents/<name>.py`` ending with
``Adapter = <YourAdapterClass>`` and add one line to ``ADAPTER_MODULES``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

from ingress.agents.base import AgentAdapter

__all__ = ["ADAPTERS", "ADAPTER_MODULES", "adapter_class", "list_conversations"]

# agent name -> module that defines ``Adapter`` (one line per agent).
ADAPTER_MODULES: dict[str, str] = {
    "claude": "ingress.agents.claude",
    "codex": "ingress.agents.codex",
    "gemini": "ingress.agents.gemini",
    "opencode": "ingress.agents.opencode",
    "command": "ingress.agents.command",
    "echo": "ingress.agents.echo",
}


def adapter_class(name: str) -> type[AgentAdapter]:
    """The adapter class for ``name`` (KeyError for an unknown agent name)."""
    module_name = ADAPTER_MODULES.get(name, f"ingress.agents.{name}")
    if not name.isidentifier():
        raise KeyError(f"unknown agent {name!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise KeyError(f"unknown agent {name!r}") from exc
        raise
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
    try:
        module = importlib.import_module(ADAPTER_MODULES.get(agent, f"ingress.agents.{agent}"))
    except ImportError:
        return []
    lister = getattr(module, "list_conversations", None)
    if lister is None:
        return []
    return list(lister(workdir, home=home))

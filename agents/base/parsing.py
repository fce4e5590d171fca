"""What every agent parser gives back, and the counters every parser keeps.

Parsers are pure (sans-IO, in the manner of h11's ``Connection``): one line of a CLI's output
in, one ``ParsedLine`` out; a malformed or unknown input is counted in ``ParserStats`` and
skipped, never raised. ``ParsedLine`` is the one output type of all of them: the agent events
the line means for the thread, and what the adapter has to do about the CLI's protocol (a
response to one of its requests, a request it must refuse, the CLI's turn starting or ending).
A parser that has nothing to say about a field leaves its default.

``AgentStatistics`` is the frozen snapshot an adapter's ``statistics()`` returns; the live
``ParserStats`` never leaves the adapter. Memory stays bounded whatever the input: skip
counters keep at most ``MAX_SKIP_KINDS`` kinds of at most ``MAX_KIND_CHARS`` characters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from threadspindle.agents.base.jsonrpc import RpcRequest, RpcResponse
from threadspindle.runtime.core.agent_events import AgentEvent

__all__ = [
    "MAX_KIND_CHARS",
    "MAX_SKIP_KINDS",
    "AgentStatistics",
    "ParsedLine",
    "ParserStats",
    "clean_tool_name",
]

MAX_SKIP_KINDS = 256  # distinct skip kinds counted by name; the rest under OTHER_KIND
MAX_KIND_CHARS = 60
OTHER_KIND = "(other)"


@dataclass(slots=True)
class ParsedLine:
    """What one line (or one decoded message) of a CLI's output means."""

    events: list[AgentEvent] = field(default_factory=list)  # for the thread, in order
    # The CLI's own id of the turn these events (and the flags below) belong to, when it
    # numbers its turns (codex); None: the turn the adapter is on.
    turn_id: str | None = None
    turn_started: bool = False  # the CLI says a turn began
    turn_ended: bool = False  # the CLI's turn is over (completed, failed or aborted)
    response: RpcResponse | None = None  # an answer to one of the adapter's requests
    refuse: RpcRequest | None = None  # a request nobody in the thread can answer: refuse now
    replay_ended: bool = False  # a resumed session's replayed history is over (gemini)


@dataclass(frozen=True, slots=True)
class AgentStatistics:
    """A frozen snapshot of an adapter's parser counters (``AgentPort.statistics()``)."""

    lines: int = 0
    events: int = 0
    skipped: int = 0  # well-formed but with no common meaning
    malformed: int = 0  # not JSON, wrong shape, wrong types
    skipped_types: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(slots=True)
class ParserStats:
    """A parser's live counters (the adapter hands out ``snapshot()``s only)."""

    lines: int = 0
    events: int = 0
    skipped: int = 0
    malformed: int = 0
    skipped_types: dict[str, int] = field(default_factory=dict)

    def skip(self, what: str, times: int = 1) -> None:
        """Count a well-formed input with no common meaning, under ``what`` (its kind)."""
        self.skipped += times
        kinds = self.skipped_types
        if what in kinds:
            kinds[what] += times
            return
        # A kind can come from the wire: cut it, and count the many-th new one as "other".
        what = what[:MAX_KIND_CHARS]
        if what not in kinds and len(kinds) >= MAX_SKIP_KINDS:
            what = OTHER_KIND
        kinds[what] = kinds.get(what, 0) + times

    def add(self, other: ParserStats) -> None:
        """Add another parser's counts (a per-turn process's parser into the adapter's)."""
        self.lines += other.lines
        self.events += other.events
        self.malformed += other.malformed
        for what, n in other.skipped_types.items():
            self.skip(what, n)

    def snapshot(self) -> AgentStatistics:
        return AgentStatistics(
            lines=self.lines,
            events=self.events,
            skipped=self.skipped,
            malformed=self.malformed,
            skipped_types=MappingProxyType(dict(self.skipped_types)),
        )


_SPLIT = re.compile(r"[_\-\s]+")


def _title(words: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in _SPLIT.split(words) if w)


def clean_tool_name(name: str) -> str:
    """``mcp__process-manager__restart_process`` -> ``Process Manager · Restart Process``;
    other names are kept as the CLI gave them (``Bash``, ``shell``)."""
    if name.startswith("mcp__"):
        server, _, tool = name[len("mcp__") :].partition("__")
        if tool:
            return f"{_title(server)} · {_title(tool)}"
        return _title(server)
    return name

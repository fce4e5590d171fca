"""The agent adapter interface every CLI adapter implements, and what they share.

An adapter drives one agent for one thread (or, for a shared server such as
``opencode serve``, one session on it). Its ``serve`` runs for the life of the process or
connection and emits every agent event, stamped with the run id of the turn it belongs to
(the one named by the last ``prompt``) and the session id: the thread's listener posts
them into the actor's queue. Process control goes through ``effects.process``.

Parsers are pure: one line (or one JSON-RPC/SSE message) in, typed events out; a malformed
or unknown input is counted in ``ParserStats`` and skipped, never raised.
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from threadspindle.effects.process import ManagedProcess
from threadspindle.effects.sandbox import Sandbox
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent
from threadspindle.runtime.core.frozen import Frozen
from threadspindle.runtime.core.model import Attachment
from threadspindle.runtime.live.ports import EmitEvent, StampedEvent

__all__ = [
    "AgentAdapter",
    "AgentOptions",
    "ConversationInfo",
    "EmitEvent",
    "McpServer",
    "ParserStats",
    "StampedEvent",
    "agent_environment",
    "clean_tool_name",
    "prompt_with_attachments",
    "spawn_agent",
]


class McpServer(Frozen):
    """An MCP server (streamable HTTP) to hand to the agent through its own config."""

    name: str
    url: str
    bearer_token: str | None = None


class AgentOptions(Frozen):
    """Configuration of one agent kind (from the config file's ``[agents.<name>]``)."""

    binary: str | None = None  # path or name on PATH; None: the adapter's default
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # added to the process environment
    home: str | None = None  # a private HOME/config dir; None: the user's own
    model: str | None = None
    system_instruction: str | None = None
    mcp_servers: tuple[McpServer, ...] = ()
    per_turn: bool = False  # fall back to one process per turn
    # How often the CLI retries a failed model call before the turn fails (each adapter
    # applies it the CLI's own way: docs/agents.md, "Retries").
    max_retries: int = 2
    start_timeout_s: float = 60.0
    stop_grace_s: float = 3.0
    sandbox: Sandbox | None = None  # run the CLI under bubblewrap (effects/sandbox.py)


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    """One past session of an agent CLI, from the CLI's own store (``/<agent>
    conversations``)."""

    session_id: str
    title: str  # the session's summary or first prompt, shortened
    updated_at: float  # POSIX time of the last update
    path: str  # where the CLI keeps it (a file, or a directory)
    workdir: str | None = None  # when the store records it


@dataclass(slots=True)
class ParserStats:
    lines: int = 0
    events: int = 0
    skipped: int = 0  # well-formed but with no common meaning
    malformed: int = 0  # not JSON, wrong shape, wrong types
    skipped_types: dict[str, int] = field(default_factory=dict)

    def skip(self, what: str) -> None:
        self.skipped += 1
        self.skipped_types[what] = self.skipped_types.get(what, 0) + 1


class AgentAdapter(ABC):
    """One agent process/connection for one thread: the base of every adapter, implementing
    the runtime's ``AgentPort`` (``runtime/live/ports.py``)."""

    name: str  # "claude", "codex", "gemini", "opencode", "echo", "command"

    def __init__(self, options: AgentOptions) -> None:
        self.options = options

    @abstractmethod
    async def serve(self, start: StartAgent, emit: EmitEvent, task_status: object) -> None:
        """Launch (or connect) and run until the process/connection ends, emitting every
        event. Call ``task_status.started()`` once ready for ``prompt``. Returns normally
        when the agent exits; the listener decides whether to start it again."""

    @abstractmethod
    async def prompt(self, prompt: PromptAgent) -> None:
        """Begin a turn; later events are stamped with ``prompt.run_id``."""

    @abstractmethod
    async def interrupt(self, run_id: str) -> None:
        """End the current turn in-band, keeping the process alive where the CLI can."""

    @abstractmethod
    async def answer_permission(self, request_id: str, allow: bool) -> None: ...

    @abstractmethod
    async def answer_question(self, request_id: str, answer: str | None) -> None: ...

    @abstractmethod
    async def stop(self) -> None:
        """Stop for good: in-band interrupt, SIGINT, SIGTERM, SIGKILL; no process left."""

    def statistics(self) -> ParserStats:
        return ParserStats()


def prompt_with_attachments(
    text: str, attachments: Sequence[Attachment] = (), *, images_apart: bool = False
) -> str:
    """The prompt as text with its attachments named: small text files inline, saved files
    by path, the rest by URL. ``images_apart``: the CLI gets saved images another way (as
    image input), so they are not named here."""
    parts = [text]
    for attachment in attachments:
        image = (attachment.content_type or "").startswith("image/")
        if attachment.inline_text is not None:
            parts.append(
                f'<attachment name="{attachment.name}">\n{attachment.inline_text}\n</attachment>'
            )
        elif attachment.path and not (images_apart and image):
            parts.append(f"[Attached file: {attachment.path}]")
        elif attachment.url and not attachment.path:
            parts.append(f"[Attached: {attachment.name} {attachment.url}]")
    return "\n\n".join(p for p in parts if p)


async def spawn_agent(
    options: AgentOptions,
    argv: Sequence[str],
    *,
    env: dict[str, str] | None,
    cwd: str | None,
    stdin: bool = True,
    expose: Sequence[str | None] = (),
) -> ManagedProcess:
    """Every adapter's one way to start its CLI: under the guard (it dies with Spindle), and
    in the sandbox when one is configured, seeing ``cwd``, the agent's home and the private
    files Spindle wrote for it (``expose``: its MCP config)."""
    return await ManagedProcess.spawn(
        argv,
        env=env,
        cwd=cwd,
        stdin=stdin,
        sandbox=options.sandbox,
        home=options.home,
        expose=tuple(p for p in expose if p),
    )


def agent_environment() -> dict[str, str]:
    """The environment an agent CLI starts from: Spindle's own, less its ``SPINDLE_*``
    variables, which hold secrets (the Discord token, the process manager's token) that an
    agent, and whatever it runs, has no business reading."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SPINDLE_")}


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

"""How an agent CLI is launched, in one shape for every CLI: ``LaunchSpec`` (argv, environment,
working directory, the private files the sandbox shows it), built by each CLI's pure
``<cli>/launch.py`` from the ``AgentOptions``, and started by ``spawn_agent``.

Shared here: the environment every CLI starts from (Spindle's own, less its ``SPINDLE_*``
secrets), the prompt text with its attachments named, the name of the environment variable
that carries an MCP bearer token, and ``PrivateDir``: a fresh 0700 temp directory for what only
one thread's agent may read (its MCP config, its settings), removed when the agent is done.
Under the sandbox no other agent sees it (their ``/tmp`` is their own); without the sandbox an
agent runs as the user and can read it, like everything else of the user's
(docs/security.md).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from threadspindle.agents.base.options import AgentOptions
from threadspindle.effects.child_env import child_environment
from threadspindle.effects.sandbox import Sandbox
from threadspindle.runtime.core.model import Attachment

__all__ = [
    "TURN_STDOUT_BYTES",
    "LaunchSpec",
    "PrivateDir",
    "agent_environment",
    "launch_environment",
    "mcp_token_env",
    "prompt_text",
]

# A process that exits when its turn ends (the per-turn modes, the generic command) says its
# last events, often the whole answer in one, just before it exits. A Node or Bun CLI drops
# what its stdout pipe has not taken by then (``effects/pipe_size.py``), so its pipe gets
# this much room rather than 64 KiB: the answer survives a reader a little behind.
TURN_STDOUT_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """Everything needed to start one CLI process (pure data)."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    # Private files the sandbox shows the process read-only (its MCP config) and private
    # directories it shows read-write (a per-thread settings home).
    expose: tuple[str, ...] = ()
    expose_writable: tuple[str, ...] = ()
    sandbox: Sandbox | None = None  # bubblewrap, seeing cwd, home and the exposed paths
    home: str | None = None  # the agent's private home (None: the user's)

    @classmethod
    def of(
        cls,
        options: AgentOptions,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        *,
        expose: Iterable[str | None] = (),
        expose_writable: Iterable[str | None] = (),
    ) -> LaunchSpec:
        """A spec with the sandbox and home of ``options``."""
        return cls(
            argv=tuple(argv),
            env=env,
            cwd=cwd,
            expose=tuple(p for p in expose if p),
            expose_writable=tuple(p for p in expose_writable if p),
            sandbox=options.sandbox,
            home=options.home,
        )


def agent_environment() -> dict[str, str]:
    """The environment an agent CLI starts from: Spindle's own, less its ``SPINDLE_*``
    variables, which hold secrets (the Discord token, the process manager's token) that an
    agent, and whatever it runs, has no business reading."""
    return child_environment()


def launch_environment(
    options: AgentOptions,
    *,
    defaults: Mapping[str, str] | None = None,
    forced: Mapping[str, str] | None = None,
    withheld: Iterable[str] = (),
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A CLI's environment, built in one order for every CLI: ``base`` (default
    ``agent_environment()``), then ``defaults`` where not set, ``forced`` over it, ``HOME``
    from ``options.home``, the user's ``options.env`` over all of that, and last the
    ``withheld`` names removed, whatever set them."""
    env = dict(agent_environment() if base is None else base)
    for name, value in (defaults or {}).items():
        env.setdefault(name, value)
    env.update(forced or {})
    if options.home:
        env["HOME"] = options.home
    env.update(dict(options.env))
    for name in withheld:
        env.pop(name, None)
    return env


def mcp_token_env(server_name: str) -> str:
    """The environment variable that carries an MCP server's bearer token to a CLI that reads
    it from there (never an argv: ``ps`` shows those to every user)."""
    return "SPINDLE_MCP_TOKEN_" + re.sub(r"[^A-Za-z0-9]", "_", server_name).upper()


def prompt_text(
    text: str,
    attachments: Sequence[Attachment] = (),
    *,
    images_apart: bool = False,
    system_instruction: str | None = None,
) -> str:
    """The prompt as text with its attachments named: small text files inline, saved files
    by path, the rest by URL. ``images_apart``: the CLI gets saved images another way (as
    image input), so they are not named here. ``system_instruction``: for a CLI with no way
    to add one to its system prompt, it goes first, tagged."""
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
    prompt = "\n\n".join(p for p in parts if p)
    if system_instruction:
        return f"<system_instruction>\n{system_instruction}\n</system_instruction>\n\n{prompt}"
    return prompt


class PrivateDir:
    """A fresh directory only its creator's user can enter (0700), in the temp dir, for the
    files of one thread's agent (see the module docstring). ``remove`` deletes it."""

    def __init__(self, prefix: str) -> None:
        self.path = tempfile.mkdtemp(prefix=prefix)

    def write(self, name: str, text: str) -> str:
        """``text`` as ``name`` (0600; replaced atomically when it exists); its path."""
        path = os.path.join(self.path, name)
        temp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temp, path)
        return path

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

"""The thread commands typed as text, read by one parser for every text-command platform
(Telegram, WhatsApp, Slack's ``@Spindle <command>``, the web chat): ``thread_action`` turns
``(name, args)`` into the action (or ``InputRefused`` with what to type), and
``typed_prompt`` turns a message into a prompt by its suffix (`` queue``, `` steer``) and
the channel's ``plain_message`` mode, or a shell command (``!<command>``).

Each platform keeps only its spelling (``Spelling``: Telegram's ``/clear_queue``, Slack's
``@Spindle clear-queue``); the commands and their arguments are the same everywhere, and
Discord's slash commands (typed options, ``ingress/discord/commands.py``) carry the same
names. Built on ``workspace_commands`` and ``schedule_commands``; like the rest of ingress it
decides nothing, it only refuses text that cannot be a command.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from threadspindle.ingress.discord.translate import (
    PlainMessageMode,
    resolve_workdir,
    split_queue_suffix,
)
from threadspindle.ingress.input_checks import (
    InputRefused,
    check_path,
    check_word,
    parse_position,
    shown,
)
from threadspindle.ingress.schedule_commands import schedule_action, verbosity_action
from threadspindle.ingress.workspace_commands import shell_action, workspace_action
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.model import Attachment
from threadspindle.runtime.live.schedules import local_timezone

__all__ = [
    "COMMANDS",
    "NO_THREADS",
    "Spelling",
    "canonical",
    "command_list",
    "thread_action",
    "typed_prompt",
]

NO_THREADS = (
    "/fork and /btw open a new thread, and this chat has none: there is nowhere to fork to "
    "here. Start a new conversation with /<agent> start, or use a platform with threads."
)

# (canonical name, arguments, what it does): every text platform's help and docs/commands.md.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("queue", "<message>", "Queue a prompt without interrupting"),
    ("steer", "<message>", "Add to the running turn without stopping it"),
    ("compact", "", "Let the agent compact (summarise) its conversation"),
    ("fork", "", "A new thread continuing this conversation"),
    ("btw", "<question>", "A side question in a forked thread"),
    ("abort", "", "Stop the active run"),
    ("status", "", "Show the run, the queue and the agent"),
    ("clear_queue", "[position]", "Drop all queued prompts, or one"),
    ("model", "<name>", "Switch model (retries the active prompt)"),
    ("workdir", "<path>", "Move the conversation"),
    ("end", "", "End the conversation and stop its agent"),
    ("schedule", "<when> <prompt> | list | cancel <id>", "A prompt later"),
    ("verbosity", "text|tools|all", "What runs show"),
    ("undo", "", "Restore the files to before the last run"),
    ("redo", "", "Re-apply what undo restored"),
    ("diff", "[base]", "What changed since the conversation started"),
    ("shell", "<command>", "Run a shell command in the workdir (or !<command>)"),
    ("worktree", "new <name> [base] | list | remove <name> [force] | merge [target]", "Worktrees"),
)

# Other spellings of a command -> its canonical name (hyphens are read as "_" first).
_ALIASES = {
    "clearqueue": "clear_queue",
    "conversation_end": "end",
}


@dataclass(frozen=True)
class Spelling:
    """How a platform writes a command in a usage line: ``prefix`` before the name (``/``,
    ``@Spindle ``) and ``sep`` for the ``_`` in a name (``-`` on Slack)."""

    prefix: str = "/"
    sep: str = "_"

    def __call__(self, name: str, args: str = "") -> str:
        return f"{self.prefix}{name.replace('_', self.sep)}" + (f" {args}" if args else "")

    def usage(self, name: str, args: str = "") -> str:
        return "usage: " + self(name, args)


def command_list(spelling: Spelling = Spelling(), *, has_threads: bool = True) -> str:
    """Every thread command in the platform's spelling, for its help text (``fork`` and
    ``btw`` only where the chat can have threads)."""
    return " · ".join(
        spelling(name, args)
        for name, args, _ in COMMANDS
        if has_threads or name not in ("fork", "btw")
    )


def canonical(name: str, args: str = "") -> tuple[str, str]:
    """``(name, args)`` with the name in its canonical spelling: lower case, ``-`` as ``_``,
    aliases resolved, and ``/conversation end`` as ``end``."""
    name = name.lower().replace("-", "_")
    if name == "conversation" and args.split()[:1] == ["end"]:
        return "end", args[3:].strip()
    return _ALIASES.get(name, name), args


def thread_action(
    name: str,
    args: str,
    common: dict[str, Any],
    *,
    author_id: str,
    author_name: str,
    source_message_id: str | None = None,
    workdir: str | None = None,
    spelling: Spelling = Spelling(),
    has_threads: bool = True,
) -> A.Action:
    """The action of the thread command ``name args`` (``common``: its thread id, action
    id and time; ``workdir``: the conversation's, for a relative ``workdir``). Refused
    (``InputRefused``) with the usage line, or at once with ``NO_THREADS`` for ``fork`` and
    ``btw`` where the chat has no threads (``has_threads``)."""
    name, args = canonical(name, args)
    words = args.split()
    who: dict[str, Any] = {"author_id": author_id, "author_name": author_name}
    if name in ("queue", "steer"):
        if not args:
            raise InputRefused(spelling.usage(name, "<message>"))
        kind = A.QueueCommand if name == "queue" else A.SteerCommand
        return kind(**common, **who, text=args, source_message_id=source_message_id)
    if name in ("fork", "btw"):
        if not has_threads:
            raise InputRefused(NO_THREADS)
        if name == "btw" and not args:
            raise InputRefused(spelling.usage("btw", "<question>"))
        return A.ForkRequested(**common, **who, question=args if name == "btw" else None)
    if name == "compact":
        return A.CompactRequested(**common, **who)
    if name == "abort":
        return A.AbortRequested(**common, author_id=author_id)
    if name == "status":
        return A.StatusRequested(**common)
    if name == "clear_queue":
        if len(words) > 1:
            raise InputRefused(spelling.usage(name, "[position]"))
        return A.QueueCleared(**common, position=parse_position(words[0]) if words else None)
    if name == "model":
        if len(words) != 1:
            raise InputRefused(spelling.usage(name, "<name>"))
        return A.ModelChanged(**common, model=check_word(words[0], "model name"))
    if name == "workdir":
        path = args[4:].strip() if words[:1] == ["set"] else args
        if not path:
            raise InputRefused(spelling.usage(name, "<path>"))
        check_path(path)
        return A.WorkdirSet(
            **common, requested_workdir=path, resolved_workdir=resolve_workdir(path, workdir)
        )
    if name == "end":
        return A.ConversationEnded(**common)
    if name == "schedule":
        return schedule_action(common, args, **who, tz=local_timezone())
    if name == "verbosity":
        return verbosity_action(common, args)
    found = workspace_action(name, args, common, author_id, author_name)
    if found is not None:
        return found
    raise InputRefused(f"Unknown command {spelling(shown(name, 40))} (try {spelling('help')}).")


def typed_prompt(
    text: str,
    common: dict[str, Any],
    *,
    author_id: str,
    author_name: str,
    source_message_id: str | None = None,
    queue_suffix: str = " queue",
    steer_suffix: str = " steer",
    mode: PlainMessageMode = "interrupt",
    shell_via_agent: bool | None = None,
    attachments: tuple[Attachment, ...] = (),
) -> A.UserMessage | A.SteerCommand | A.ShellRequested:
    """A message that is no command: a shell command when it starts with ``!`` (in the
    agent's own shell as the channel's ``shell_via_agent`` says; None: the runtime's
    choice), else a prompt, steered by the steer suffix, queued by the queue suffix, and
    without a suffix as ``mode`` says (interrupt, queue or steer)."""
    shell = shell_action(text, common, author_id, author_name, via_agent=shell_via_agent)
    if shell is not None:
        return shell
    who: dict[str, Any] = {"author_id": author_id, "author_name": author_name}
    prompt, steered = split_queue_suffix(text, steer_suffix)
    queued = False
    if not steered:
        prompt, queued = split_queue_suffix(text, queue_suffix)
        steered = mode == "steer" and not queued
    if steered:
        return A.SteerCommand(
            **common,
            **who,
            text=prompt,
            attachments=attachments,
            source_message_id=source_message_id,
        )
    return A.UserMessage(
        **common,
        **who,
        text=prompt,
        attachments=attachments,
        source_message_id=source_message_id,
        interrupt=not queued and mode != "queue",
    )

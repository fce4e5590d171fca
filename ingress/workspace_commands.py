"""The workspace commands as every platform types them: ``!<command>`` and ``/shell``,
``/undo``, ``/redo``, ``/diff [base]`` and ``/worktree new|list|remove|merge``
(docs/workspaces.md), turned into actions by one parser the console, Discord and
Telegram share. Like the rest of ingress it decides nothing (who may run a shell command
is the core's call, from the policy); it only refuses text that cannot be a command.
"""

from __future__ import annotations

import re
from typing import Any

from threadspindle.ingress.input_checks import InputRefused, check_word
from threadspindle.runtime.core import actions as A

__all__ = ["COMMANDS", "USAGE", "new_thread_worktree", "shell_action", "workspace_action"]

SHELL_PREFIX = "!"
MAX_COMMAND_CHARS = 4000
# (command, description) for the platforms' command lists (Telegram names them with "_").
COMMANDS: tuple[tuple[str, str], ...] = (
    ("undo", "Restore the files to before the last run"),
    ("redo", "Re-apply what /undo restored"),
    ("diff", "What changed since the conversation started: /diff [base]"),
    ("shell", "Run a shell command in the workdir: /shell <command> (or !<command>)"),
    (
        "worktree",
        "Worktrees: /worktree new <name> [base] | list | remove <name> [force] | merge [target]",
    ),
)
USAGE = "usage: /worktree new <name> [base] | list | remove <name> [force] | merge [target]"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def is_shell_text(text: str) -> bool:
    """Whether a message is a ``!`` shell command (what ``shell_action`` makes one of)."""
    return text.startswith(SHELL_PREFIX) and bool(text[1:].strip())


def shell_action(
    text: str,
    common: dict[str, Any],
    author_id: str,
    author_name: str = "",
    via_agent: bool | None = None,
) -> A.ShellRequested | None:
    """A message starting with ``!`` is a shell command; None for any other text.
    ``via_agent``: the channel's choice of the agent's own shell (None: the runtime's)."""
    if not is_shell_text(text):
        return None
    return _shell(text[1:], common, author_id, author_name).replace(via_agent=via_agent)


def _shell(
    command: str, common: dict[str, Any], author_id: str, author_name: str
) -> A.ShellRequested:
    command = command.strip()
    if not command:
        raise InputRefused("usage: /shell <command> (or a message starting with !)")
    if len(command) > MAX_COMMAND_CHARS:
        raise InputRefused(f"A shell command may be at most {MAX_COMMAND_CHARS} characters.")
    return A.ShellRequested(**common, author_id=author_id, author_name=author_name, command=command)


def _worktree_name(value: str) -> str:
    check_word(value, "worktree name")
    if not _NAME.match(value) or value.endswith(".lock"):
        raise InputRefused(
            "A worktree name is up to 64 letters, digits, '.', '_' or '-' (not starting with "
            "'.' or '-')."
        )
    return value


def workspace_action(
    name: str, args: str, common: dict[str, Any], author_id: str, author_name: str = ""
) -> A.Action | None:
    """The action of the command ``/<name> <args>`` when it is a workspace command (None
    when it is not one). ``name`` may be Telegram's ``worktree_new`` form."""
    name = name.lower()
    words = args.split()
    if name.startswith("worktree_"):
        name, words = "worktree", [name.removeprefix("worktree_"), *words]
    if name == "shell":
        return _shell(args, common, author_id, author_name)
    if name in ("undo", "redo"):
        if words:
            raise InputRefused(f"usage: /{name} (no arguments)")
        return A.WorkspaceCommand(**common, op=name, author_id=author_id)  # type: ignore[arg-type]
    if name == "diff":
        if words not in ([], ["base"]):
            raise InputRefused("usage: /diff [base]")
        return A.WorkspaceCommand(
            **common, op="diff", author_id=author_id, ref="base" if words else None
        )
    if name != "worktree":
        return None
    sub, rest = (words[0].lower(), words[1:]) if words else ("", [])
    if sub == "new" and 1 <= len(rest) <= 2:
        base = check_word(rest[1], "base branch", 200) if len(rest) == 2 else None
        return A.WorkspaceCommand(
            **common, op="worktree_new", author_id=author_id, name=_worktree_name(rest[0]), ref=base
        )
    if sub == "list" and not rest:
        return A.WorkspaceCommand(**common, op="worktree_list", author_id=author_id)
    if sub == "remove" and 1 <= len(rest) <= 2 and rest[1:] in ([], ["force"], ["--force"]):
        return A.WorkspaceCommand(
            **common,
            op="worktree_remove",
            author_id=author_id,
            name=_worktree_name(rest[0]),
            force=len(rest) == 2,
        )
    if sub == "merge" and len(rest) <= 1:
        target = check_word(rest[0], "target branch", 200) if rest else None
        return A.WorkspaceCommand(**common, op="worktree_merge", author_id=author_id, ref=target)
    raise InputRefused(USAGE)


def new_thread_worktree(thread_id: str, at: float) -> A.WorkspaceCommand:
    """``/worktree new`` for a new thread of a project channel with ``worktree = true``:
    named after the thread, made from the repository's current branch. Posted right after
    the thread's ``ConversationStarted``, so its first prompt waits for the worktree."""
    name = "thread-" + re.sub(r"[^A-Za-z0-9._-]", "-", thread_id)[-50:]
    return A.WorkspaceCommand(
        thread_id=thread_id, action_id=f"worktree-{thread_id}", at=at, op="worktree_new", name=name
    )

"""Pure translation of Telegram happenings into runtime actions: no PTB calls, no I/O except
the workdir resolution (``ingress.discord.translate.resolve_workdir``, which ingress owes
the core).

- **Threads**: a private chat is one thread, a forum topic is one, a plain group is one;
  a forum's General topic is none (``thread_of``). The ids are spelled by
  ``effects.telegram_platform.telegram_thread_id``.
- **Action ids** come from Telegram's own ids, so an update delivered twice (Telegram
  redelivers what was not confirmed by the next ``getUpdates`` offset) yields the same
  action id and the core drops the second: ``tgm-<chat>-<message>`` for a message or
  command, ``tgs-<chat>-<message>`` for the conversation a project message starts,
  ``tge-<chat>-<message>-<edit date>`` for an edit, ``tgcb-<callback query id>`` for a
  button.
- **Commands** are Telegram bot commands (``[a-z0-9_]``, no hyphen): ``COMMANDS`` lists
  what ``setMyCommands`` registers, with docs/commands.md's Discord name beside each.
"""

from __future__ import annotations

from dataclasses import dataclass

from threadspindle.effects.chunking import parse_component_action
from threadspindle.effects.telegram_platform import telegram_thread_id
from threadspindle.ingress.discord.translate import split_queue_suffix
from threadspindle.ingress.workspace_commands import COMMANDS as WORKSPACE_COMMANDS
from threadspindle.runtime.core.actions import (
    SourceMessageDeleted,
    SourceMessageEdited,
)

__all__ = [
    "COMMANDS",
    "ParsedCommand",
    "callback_action_id",
    "edit_action",
    "message_action_id",
    "parse_callback",
    "parse_command",
    "start_action_id",
    "thread_of",
]

# (Telegram command, its description): what setMyCommands registers, agents first.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("queue", "Queue a prompt without interrupting: /queue <message>"),
    ("steer", "Add to the running turn without stopping it: /steer <message>"),
    ("compact", "Let the agent compact (summarise) its conversation"),
    ("fork", "A new topic continuing this conversation"),
    ("btw", "Ask on the side in a forked topic: /btw <question>"),
    ("abort", "Stop the active run"),
    ("status", "Show the run, the queue and the agent"),
    ("clear_queue", "Drop all queued prompts, or one: /clear_queue [position]"),
    ("model", "Switch model (retries the active prompt): /model <name>"),
    ("workdir", "Move the conversation: /workdir <path>"),
    ("conversation_end", "End the conversation and stop its agent"),
    ("schedule", "A prompt later: /schedule <when> <prompt> | list | cancel <id>"),
    ("verbosity", "What runs show: /verbosity text|tools|all"),
    ("help", "What Spindle understands here"),
    *((name, text) for name, text in WORKSPACE_COMMANDS),
)


def agent_commands(agents: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    return tuple(
        (agent, f"start [workdir] | resume <id> [workdir] | conversations ({agent})")
        for agent in agents
    )


def thread_of(chat_id: int, chat_type: str, is_forum: bool, topic: int | None) -> str | None:
    """The Spindle thread of a message: None for a forum's General topic."""
    if chat_type == "private" or not is_forum:
        return telegram_thread_id(chat_id)
    return telegram_thread_id(chat_id, topic) if topic is not None else None


def message_action_id(chat_id: int, message_id: int) -> str:
    return f"tgm-{chat_id}-{message_id}"


def start_action_id(chat_id: int, message_id: int) -> str:
    return f"tgs-{chat_id}-{message_id}"


def callback_action_id(callback_query_id: str) -> str:
    return f"tgcb-{callback_query_id}"


@dataclass(frozen=True)
class ParsedCommand:
    name: str  # lower case, without the bot's @name
    args: str  # the rest of the text, stripped


def parse_command(text: str, bot_username: str) -> ParsedCommand | None:
    """``/name[@bot] args`` -> the command; None when it is not one, or names another bot."""
    if not text.startswith("/"):
        return None
    head, _, rest = text[1:].partition(" ")
    head, newline, tail = head.partition("\n")
    if newline:
        rest = tail + (" " + rest if rest else "")
    name, _, addressee = head.partition("@")
    if not name or (addressee and addressee.lower() != bot_username.lower()):
        return None
    return ParsedCommand(name.lower(), rest.strip())


def edit_action(
    *,
    thread_id: str,
    chat_id: int,
    message_id: int,
    text: str,
    was_queued: bool,
    edit_date: int,
    at: float,
    suffix: str = " queue",
) -> SourceMessageEdited | SourceMessageDeleted:
    """An edit updates the waiting prompt; editing the queue suffix away withdraws it
    (Telegram tells bots nothing of deleted messages, so that is the way to withdraw one)."""
    prompt, queued = split_queue_suffix(text, suffix)
    action_id = f"tge-{chat_id}-{message_id}-{edit_date}"
    if was_queued and not queued:
        return SourceMessageDeleted(
            thread_id=thread_id, action_id=action_id, at=at, source_message_id=str(message_id)
        )
    return SourceMessageEdited(
        thread_id=thread_id,
        action_id=action_id,
        at=at,
        source_message_id=str(message_id),
        text=prompt,
    )


def parse_callback(action: str) -> tuple[str, str, str | None]:
    """``(kind, id, detail)`` of a button's action: ``("remove_queued", item, None)``,
    ``("permission", request, "allow"|"deny")``, ``("question", request, option index)``;
    ``("", "", None)`` for anything else."""
    kind, _, rest = action.partition(":")
    if kind == "remove_queued" and rest:
        return kind, rest, None
    parsed = parse_component_action(action)  # the renderer's own ids
    if parsed is not None:
        kind, request, allow = parsed
        if kind == "permission":
            return kind, request, "allow" if allow else "deny"
        request, _, index = request.rpartition("#")
        if request and index.isdigit():
            return kind, request, index
    return "", "", None

"""Pure translation of Slack happenings into runtime actions: no Slack calls, no I/O except
the workdir resolution (``ingress.discord.translate.resolve_workdir``, which ingress owes
the core).

- **Threads**: a Slack thread (its parent's ``ts``) in a channel is one Spindle thread
  (``thread_of``); a top-level message is in none. The ids are spelled by
  ``effects.slack_platform.slack_thread_id``.
- **Action ids** come from Slack's own ids, so an envelope Slack delivers again (it does
  until acknowledged, and Spindle acknowledges only once the action is durable) or a
  message caught up after a restart yields the same action id and the core drops the
  second: ``slm-<channel>-<ts>`` for a message or a command in a thread,
  ``sls-<channel>-<ts>`` for the conversation a project message starts,
  ``sle-<channel>-<ts>-<edit ts>`` for an edit, ``sld-<channel>-<ts>`` for a delete,
  ``slb-<user>-<action ts>`` for a button, ``slc-<trigger id>`` for a slash command.
- **Commands**: Slack runs no slash command inside a thread, so one slash command
  (``/spindle <command> …``) works in a channel, and in a thread the same words follow a
  mention of the app (``@Spindle abort``); ``COMMANDS`` lists them with docs/commands.md's
  Discord name beside each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from threadspindle.effects.slack_platform import slack_thread_id
from threadspindle.ingress.discord.translate import split_queue_suffix
from threadspindle.ingress.telegram.translate import parse_callback
from threadspindle.ingress.thread_commands import COMMANDS as THREAD_COMMANDS
from threadspindle.runtime.core.actions import (
    SourceMessageDeleted,
    SourceMessageEdited,
)

__all__ = [
    "COMMANDS",
    "ParsedCommand",
    "button_action_id",
    "delete_action",
    "edit_action",
    "message_action_id",
    "parse_callback",
    "parse_command",
    "parse_mention_command",
    "slash_action_id",
    "start_action_id",
    "thread_of",
]

# (Slack spelling after @Spindle, what it does): the help text and the docs; the thread
# commands every text platform shares (``ingress.thread_commands``), "-" for "_".
COMMANDS: tuple[tuple[str, str], ...] = (
    *((f"{name.replace('_', '-')} {args}".rstrip(), text) for name, args, text in THREAD_COMMANDS),
    ("help", "What Spindle understands here"),
)


def thread_of(channel: str, thread_ts: str | None) -> str | None:
    """The Spindle thread of a message: None for a top-level one."""
    return slack_thread_id(channel, thread_ts) if thread_ts else None


def message_action_id(channel: str, ts: str) -> str:
    return f"slm-{channel}-{ts}"


def start_action_id(channel: str, ts: str) -> str:
    return f"sls-{channel}-{ts}"


def button_action_id(user: str, action_ts: str) -> str:
    return f"slb-{user}-{action_ts}"


def slash_action_id(trigger_id: str) -> str:
    return f"slc-{trigger_id}"


@dataclass(frozen=True)
class ParsedCommand:
    name: str  # lower case; ``clear_queue`` and ``clear-queue`` are one
    args: str  # the rest of the text, stripped


def parse_command(text: str) -> ParsedCommand | None:
    """``name args`` (the text after ``/spindle`` or a mention); None when empty."""
    words = text.strip().split(maxsplit=1)
    if not words:
        return None
    return ParsedCommand(words[0].lower().replace("_", "-"), words[1].strip() if words[1:] else "")


def parse_mention_command(text: str, bot_user: str) -> ParsedCommand | None:
    """A message that starts with a mention of the app is a command (``<@U…> abort``);
    None for any other message (a prompt)."""
    match = re.match(rf"^\s*<@{re.escape(bot_user)}(?:\|[^>]*)?>[\s:,]*(.*)$", text, re.S)
    if match is None:
        return None
    return parse_command(match.group(1)) or ParsedCommand("help", "")


def edit_action(
    *,
    thread_id: str,
    channel: str,
    ts: str,
    text: str,
    previous_text: str,
    edit_ts: str,
    at: float,
    suffix: str = " queue",
) -> SourceMessageEdited | SourceMessageDeleted:
    """An edit updates the waiting prompt; editing the queue suffix away withdraws it (as on
    Discord). Whether it was queued is read from Slack's own ``previous_message``."""
    prompt, queued = split_queue_suffix(text, suffix)
    was_queued = split_queue_suffix(previous_text, suffix)[1]
    action_id = f"sle-{channel}-{ts}-{edit_ts}"
    if was_queued and not queued:
        return SourceMessageDeleted(
            thread_id=thread_id, action_id=action_id, at=at, source_message_id=ts
        )
    return SourceMessageEdited(
        thread_id=thread_id, action_id=action_id, at=at, source_message_id=ts, text=prompt
    )


def delete_action(*, thread_id: str, channel: str, ts: str, at: float) -> SourceMessageDeleted:
    return SourceMessageDeleted(
        thread_id=thread_id, action_id=f"sld-{channel}-{ts}", at=at, source_message_id=ts
    )

"""Pure translation of Discord happenings into runtime actions: no discord.py, no I/O
except the workdir resolution (which ingress owes the core: the core judges the real
path, it never touches the filesystem).

Ingress makes no decisions: whether a prompt interrupts, is queued, or is refused is the
core's call. The conventions decided here are syntactic: a message ending with the queue
suffix (`` queue``) is a non-interrupting prompt, one ending with the steer suffix
(`` steer``) is added to the running turn (``SteerCommand``), and a message with neither
is delivered the channel's way (``plain_message``: interrupt, the default; queue; steer).

Action ids are derived from Discord ids, so a gateway event delivered twice (a resume
replay) yields the same action id and the core drops the duplicate.
"""

from __future__ import annotations

import os
from typing import Literal

from threadspindle.effects.render import parse_component_action
from threadspindle.runtime.core.actions import (
    SourceMessageDeleted,
    SourceMessageEdited,
    SteerCommand,
    UserMessage,
)
from threadspindle.runtime.core.model import Attachment

__all__ = [
    "complete_directory",
    "component_action_id",
    "edit_action",
    "interaction_action_id",
    "message_action",
    "message_action_id",
    "PlainMessageMode",
    "parse_custom_id",
    "is_queued",
    "prompt_action",
    "resolve_workdir",
    "split_queue_suffix",
]


def message_action_id(message_id: int) -> str:
    return f"msg-{message_id}"


def interaction_action_id(interaction_id: int) -> str:
    return f"int-{interaction_id}"


def component_action_id(interaction_id: int) -> str:
    return f"cmp-{interaction_id}"


def split_queue_suffix(text: str, suffix: str = " queue") -> tuple[str, bool]:
    """``("fix it", True)`` for ``"fix it. queue"``; the text unchanged otherwise."""
    stripped = text.rstrip()
    if stripped.lower().endswith(suffix.lower()) and len(stripped) > len(suffix):
        return stripped[: -len(suffix)].rstrip(), True
    return text, False


def message_action(
    *,
    thread_id: str,
    message_id: int,
    author_id: int,
    author_name: str,
    text: str,
    at: float,
    attachments: tuple[Attachment, ...] = (),
    suffix: str = " queue",
) -> UserMessage:
    prompt, queued = split_queue_suffix(text, suffix)
    return UserMessage(
        thread_id=thread_id,
        action_id=message_action_id(message_id),
        at=at,
        author_id=str(author_id),
        author_name=author_name,
        text=prompt,
        attachments=attachments,
        source_message_id=str(message_id),
        interrupt=not queued,
    )


PlainMessageMode = Literal["interrupt", "queue", "steer"]
"""How a message without a suffix is delivered while a run is active."""


def prompt_action(
    *,
    thread_id: str,
    message_id: int,
    author_id: int,
    author_name: str,
    text: str,
    at: float,
    attachments: tuple[Attachment, ...] = (),
    suffix: str = " queue",
    steer_suffix: str = " steer",
    mode: PlainMessageMode = "interrupt",
) -> UserMessage | SteerCommand:
    """A chat message as a prompt: ``message_action``, except that the steer suffix (or,
    without any suffix, ``mode == "steer"``) makes it a ``SteerCommand``, and ``mode ==
    "queue"`` queues a message without a suffix."""
    prompt, steered = split_queue_suffix(text, steer_suffix)
    queued = False
    if not steered:
        queued = split_queue_suffix(text, suffix)[1]
        steered = not queued and mode == "steer"
    if steered:
        return SteerCommand(
            thread_id=thread_id,
            action_id=message_action_id(message_id),
            at=at,
            author_id=str(author_id),
            author_name=author_name,
            text=prompt,
            attachments=attachments,
            source_message_id=str(message_id),
        )
    action = message_action(
        thread_id=thread_id,
        message_id=message_id,
        author_id=author_id,
        author_name=author_name,
        text=text,
        at=at,
        attachments=attachments,
        suffix=suffix,
    )
    if mode == "queue" and action.interrupt:
        action = action.model_copy(update={"interrupt": False})
    return action


def is_queued(action: UserMessage | SteerCommand) -> bool:
    """The action waits in the queue (its chat message's edits and deletes follow it)."""
    return isinstance(action, UserMessage) and not action.interrupt


def edit_action(
    *,
    thread_id: str,
    message_id: int,
    text: str,
    was_queued: bool,
    at: float,
    edit_stamp: str,
    suffix: str = " queue",
) -> SourceMessageEdited | SourceMessageDeleted:
    """An edit updates the waiting prompt; editing the queue suffix away withdraws it."""
    prompt, queued = split_queue_suffix(text, suffix)
    if was_queued and not queued:
        return SourceMessageDeleted(
            thread_id=thread_id,
            action_id=f"edit-{message_id}-{edit_stamp}",
            at=at,
            source_message_id=str(message_id),
        )
    return SourceMessageEdited(
        thread_id=thread_id,
        action_id=f"edit-{message_id}-{edit_stamp}",
        at=at,
        source_message_id=str(message_id),
        text=prompt,
    )


def delete_action(*, thread_id: str, message_id: int, at: float) -> SourceMessageDeleted:
    return SourceMessageDeleted(
        thread_id=thread_id,
        action_id=f"del-{message_id}",
        at=at,
        source_message_id=str(message_id),
    )


def resolve_workdir(requested: str, base: str | None = None) -> str | None:
    """The real path of an existing directory (``~`` expanded, relative to ``base``), or
    None. Symlinks and ``..`` are resolved so the core judges where the path lands.

    Never raises: a path the OS cannot take (a NUL, too long, a loop of symlinks) is None
    too. Ingress refuses such text before it gets here (``input_checks.check_path``); this
    is the last line, so a path no check foresaw still cannot take the ingress loop down."""
    try:
        path = os.path.expanduser(requested.strip() or "~")
        if not os.path.isabs(path) and base:
            path = os.path.join(os.path.expanduser(base), path)
        real = os.path.realpath(path)
        return real if os.path.isdir(real) else None
    except (OSError, ValueError):
        return None


def complete_directory(current: str, base: str | None = None, limit: int = 25) -> list[str]:
    """Directories to offer while a path is typed: the children of what is typed so far
    whose names start with its last part (hidden ones only when asked for), sorted."""
    typed = current.strip() or (base or "~")
    try:  # ValueError: a NUL in what was typed (``~user`` lookups raise it too)
        path = os.path.expanduser(typed)
        if not os.path.isabs(path) and base:
            path = os.path.join(os.path.expanduser(base), path)
        folder, prefix = (path, "") if typed.endswith("/") else os.path.split(path)
        names = sorted(os.listdir(folder or "/"))
    except (OSError, ValueError):
        return []
    shown = typed if typed.endswith("/") else typed[: len(typed) - len(prefix)]
    found = []
    for name in names:
        if not name.startswith(prefix) or (name.startswith(".") and not prefix.startswith(".")):
            continue
        if os.path.isdir(os.path.join(folder, name)):
            found.append(f"{shown}{name}/")
        if len(found) >= limit:
            break
    return found


def parse_custom_id(custom_id: str) -> tuple[str, tuple[str, ...]]:
    """Split a component id into ``(kind, args)``.

    ``remove_queued:<item id>`` is ours (the core's "Remove from queue" button); the
    permission buttons and question menus are the renderer's
    (``effects.render.permission_action`` / ``question_menu_id``), parsed by its own
    ``parse_component_action``: ``("permission", (request_id, "allow"|"deny"))``,
    ``("question", (request_id,))``. Anything else is ``("", ())``.
    """
    kind, _, rest = custom_id.partition(":")
    if kind == "remove_queued" and rest:
        return kind, (rest,)
    parsed = parse_component_action(custom_id)
    if parsed is None:
        return "", ()
    kind, request_id, allow = parsed
    if kind == "permission":
        return kind, (request_id, "allow" if allow else "deny")
    return kind, (request_id,)

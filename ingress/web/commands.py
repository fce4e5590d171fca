"""What the web chat's users do -> actions: pure, no I/O but resolving a workdir's path.

A line typed into a thread's box is a prompt (one ending in `` queue`` waits its turn
instead of interrupting) or one of the commands of docs/commands.md in the console's
spelling (``/queue``, ``/abort``, ``/status``, ``/clear-queue [n]``, ``/model``,
``/workdir set``, ``/conversation end``); a button press is its button's action
(``remove_queued:<item>``, ``permission:allow|deny:<request>``) or a question's answer.
Values are checked where they enter (``ingress.input_checks``): a refusal is an
``InputRefused`` with the sentence to show. Action ids are the web ingress's own, unique
per process start (``WebIds``).
"""

from __future__ import annotations

import itertools
import secrets
import shlex
from typing import Any

from threadspindle.effects.chunking import parse_component_action
from threadspindle.ingress.discord.translate import resolve_workdir, split_queue_suffix
from threadspindle.ingress.input_checks import (
    InputRefused,
    check_path,
    check_word,
    parse_position,
    shown,
)
from threadspindle.ingress.schedule_commands import schedule_action, verbosity_action
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.model import ThreadState
from threadspindle.runtime.live.schedules import local_timezone

__all__ = [
    "AUTHOR",
    "MAX_PROMPT_CHARS",
    "WebIds",
    "button_action",
    "line_action",
    "start_action",
    "web_thread_id",
]

AUTHOR = "you"  # the one user of the page: "» you: …", "Allowed by @you"
MAX_PROMPT_CHARS = 100_000


class WebIds:
    """Action and thread ids of this process: a random boot prefix and a counter."""

    def __init__(self) -> None:
        self._boot = secrets.token_hex(4)
        self._n = itertools.count(1)

    def action_id(self) -> str:
        return f"web-{self._boot}-{next(self._n)}"

    def thread_id(self) -> str:
        return web_thread_id(secrets.token_hex(6))


def web_thread_id(name: str) -> str:
    return f"web:{name}"


def start_action(
    thread_id: str, action_id: str, at: float, agent: str, workdir: str, agents: tuple[str, ...]
) -> A.ConversationStarted:
    """A new conversation; the core judges the workdir against the allowed roots."""
    if agent not in agents:
        raise InputRefused(f"Unknown agent {shown(agent, 40)!r}: one of {', '.join(agents)}.")
    check_path(workdir)
    return A.ConversationStarted(
        thread_id=thread_id,
        action_id=action_id,
        at=at,
        agent=agent,
        requested_workdir=workdir,
        resolved_workdir=resolve_workdir(workdir),
    )


def line_action(
    state: ThreadState | None, thread_id: str, action_id: str, at: float, line: str
) -> A.Action:
    """The action of one typed line; ``InputRefused`` with the reason when there is none."""
    text = line.strip("\n")
    if not text.strip():
        raise InputRefused("Type a prompt or a command.")
    if len(text) > MAX_PROMPT_CHARS:
        raise InputRefused(f"A message may have at most {MAX_PROMPT_CHARS} characters.")
    common: dict[str, Any] = {"thread_id": thread_id, "action_id": action_id, "at": at}
    who: dict[str, Any] = {"author_id": AUTHOR, "author_name": AUTHOR}
    if not text.startswith("/"):
        prompt, queued = split_queue_suffix(text)
        return A.UserMessage(
            **common, **who, text=prompt, source_message_id=action_id, interrupt=not queued
        )
    try:
        words = shlex.split(text[1:])
    except ValueError:
        words = text[1:].split()
    head = words[0].lower() if words else ""
    args = words[1:]
    rest = text[1:].strip()[len(words[0]) :].strip() if words else ""
    if head == "queue" and rest:
        return A.QueueCommand(**common, **who, text=rest)
    if head == "abort":
        return A.AbortRequested(**common, author_id=AUTHOR)
    if head == "status":
        return A.StatusRequested(**common)
    if head == "clear-queue":
        if len(args) > 1:
            raise InputRefused("usage: /clear-queue [position]")
        return A.QueueCleared(**common, position=parse_position(args[0]) if args else None)
    if head == "model" and len(args) == 1:
        return A.ModelChanged(**common, model=check_word(args[0], "model name"))
    if head == "workdir" and args[:1] == ["set"] and len(args) >= 2:
        path = check_path(" ".join(args[1:]))
        base = state.conversation.workdir if state and state.conversation else None
        return A.WorkdirSet(
            **common, requested_workdir=path, resolved_workdir=resolve_workdir(path, base)
        )
    if head == "conversation" and args[:1] == ["end"]:
        return A.ConversationEnded(**common)
    if head == "schedule":
        return schedule_action(common, rest, **who, tz=local_timezone())
    if head == "verbosity":
        return verbosity_action(common, rest)
    raise InputRefused(
        f"Unknown command /{shown(head, 40)}: /queue <message>, /abort, /status, "
        "/clear-queue [position], /model <name>, /workdir set <path>, /conversation end, "
        "/schedule <when> <prompt> | list | cancel <id>, /verbosity text|tools|all."
    )


def button_action(
    state: ThreadState | None,
    thread_id: str,
    action_id: str,
    at: float,
    button: str,
    answer: str | None = None,
) -> A.Action:
    """The action of a pressed button (its ``action``), or of a question's answer
    (``question:<request>`` with ``answer``). Refused when it is no longer pending."""
    common: dict[str, Any] = {"thread_id": thread_id, "action_id": action_id, "at": at}
    if button.startswith("remove_queued:"):
        item = button.removeprefix("remove_queued:")
        if state is None or not any(q.id == item for q in state.queue):
            raise InputRefused("That prompt is no longer queued.")
        return A.QueuedItemRemoved(**common, item_id=item)
    parsed = parse_component_action(button)
    if parsed is None:
        raise InputRefused("That button does nothing here.")
    kind, request, allow = parsed
    if state is None or not any(b.request_id == request and b.kind == kind for b in state.blockers):
        raise InputRefused("That prompt is no longer pending.")
    if kind == "permission":
        assert allow is not None
        return A.PermissionAnswered(**common, request_id=request, allow=allow, author_id=AUTHOR)
    if answer is None or not answer.strip():
        raise InputRefused("An answer is needed.")
    if len(answer) > MAX_PROMPT_CHARS:
        raise InputRefused(f"An answer may have at most {MAX_PROMPT_CHARS} characters.")
    return A.QuestionAnswered(**common, request_id=request, answer=answer, author_id=AUTHOR)

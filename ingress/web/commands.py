"""What the web chat's users do -> actions: pure, no I/O but resolving a workdir's path.

A line typed into a thread's box is a prompt (one ending in `` queue`` waits its turn
instead of interrupting, one ending in `` steer`` is added to the running turn), a shell
command (``!<command>``) or one of the thread commands every text platform reads
(``ingress.thread_commands``: ``/queue``, ``/steer``, ``/fork``, ``/diff``, ...); a
button press is its button's action (``remove_queued:<item>``,
``permission:allow|deny:<request>``) or a question's answer.
Values are checked where they enter (``ingress.input_checks``): a refusal is an
``InputRefused`` with the sentence to show. Action ids are the web ingress's own, unique
per process start (``WebIds``).
"""

from __future__ import annotations

import itertools
import secrets
from typing import Any

from threadspindle.effects.chunking import parse_component_action
from threadspindle.ingress.discord.translate import resolve_workdir
from threadspindle.ingress.input_checks import (
    MAX_PROMPT_CHARS,
    InputRefused,
    check_path,
    shown,
)
from threadspindle.ingress.thread_commands import command_list, thread_action, typed_prompt
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.model import ThreadState

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
    if not text.startswith("/"):
        return typed_prompt(
            text, common, author_id=AUTHOR, author_name=AUTHOR, source_message_id=action_id
        )
    words = text[1:].strip().split(maxsplit=1)  # "/queue\nmore" too
    if not words:
        raise InputRefused("Type a command after the /, or /help.")
    name, args = words[0], words[1] if len(words) > 1 else ""
    if name.lower() == "help":  # answered like a refusal: the sentence shown to the user
        raise InputRefused(
            'A line is a prompt (ending in " queue": it waits its turn; in " steer": added to '
            "the running turn), !<command> a shell command, or: " + command_list()
        )
    return thread_action(
        name,
        args,
        common,
        author_id=AUTHOR,
        author_name=AUTHOR,
        source_message_id=action_id,
        workdir=state.conversation.workdir if state and state.conversation else None,
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

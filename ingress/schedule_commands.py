"""``/schedule`` and ``/verbosity`` as text, for the ingresses that read commands from a
line (the console, Telegram): the arguments -> the action, or ``InputRefused`` with what to
type. Discord gets the same actions from its slash-command options
(``ingress/discord/commands.py``).

``/schedule <when> <prompt>`` adds one (``when``: a delay, a time or a cron expression,
``runtime.live.schedules.parse_when``), ``/schedule list`` lists them, ``/schedule cancel
<id>`` drops one. The time zone is the runtime's (``Runtime.timezone``).
"""

from __future__ import annotations

from datetime import tzinfo
from typing import Any, get_args

from threadspindle.ingress.input_checks import InputRefused, check_word, shown
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.model import Verbosity
from threadspindle.runtime.live.schedules import HELP, WhenError, parse_when, split_when

__all__ = [
    "LEVELS",
    "SCHEDULE_USAGE",
    "VERBOSITY_USAGE",
    "schedule_action",
    "schedule_add_action",
    "verbosity_action",
]

SCHEDULE_USAGE = (
    "usage: /schedule <when> <prompt> | /schedule list | /schedule cancel <id>. " + HELP
)
VERBOSITY_USAGE = (
    "usage: /verbosity text|tools|all (only the answer; plus one line per tool; everything)"
)
LEVELS: tuple[str, ...] = get_args(Verbosity)


def schedule_add_action(
    base: dict[str, Any],
    *,
    when: str,
    prompt: str,
    author_id: str,
    author_name: str,
    tz: tzinfo,
) -> A.ScheduleAdded:
    """``/schedule`` with ``when`` and ``prompt`` apart (Discord's two options)."""
    try:
        parsed = parse_when(when, base["at"], tz)
    except WhenError as exc:
        raise InputRefused(str(exc)) from None
    if not prompt.strip():
        raise InputRefused(SCHEDULE_USAGE)
    return A.ScheduleAdded(
        **base,
        author_id=author_id,
        author_name=author_name,
        text=prompt,
        due_at=parsed.due_at,
        cron=parsed.cron,
        label=parsed.label,
    )


def schedule_action(
    base: dict[str, Any], rest: str, *, author_id: str, author_name: str, tz: tzinfo
) -> A.ScheduleAdded | A.SchedulesListed | A.ScheduleCancelled:
    """The action for ``/schedule <rest>`` typed as one line."""
    words = rest.split()
    if not words:
        raise InputRefused(SCHEDULE_USAGE)
    if words[0].lower() == "list" and len(words) == 1:
        return A.SchedulesListed(**base)
    if words[0].lower() == "cancel":
        if len(words) != 2:
            raise InputRefused("usage: /schedule cancel <id> (the ids are in /schedule list)")
        return A.ScheduleCancelled(**base, schedule_id=check_word(words[1], "schedule id", 20))
    try:
        when, prompt = split_when(rest, base["at"], tz)
    except WhenError as exc:
        raise InputRefused(str(exc)) from None
    return A.ScheduleAdded(
        **base,
        author_id=author_id,
        author_name=author_name,
        text=prompt,
        due_at=when.due_at,
        cron=when.cron,
        label=when.label,
    )


def verbosity_action(base: dict[str, Any], level: str) -> A.VerbositySet:
    chosen = level.strip().lower()
    if chosen not in LEVELS:
        raise InputRefused(f"{shown(level, 20)!r}: {VERBOSITY_USAGE}")
    return A.VerbositySet(**base, verbosity=chosen)  # type: ignore[arg-type]

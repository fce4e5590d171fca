"""Time for scheduled prompts: parse what a user means by *when*, and the timer that posts
``ScheduleDue`` when a schedule's time has come.

The core keeps schedules in the thread state and never reads a clock; this module is the
clock's side. ``parse_when`` turns ``in 2h``, ``14:30``, ``2026-12-01 09:00`` or a cron
expression (``*/30 * * * *``, ``@daily``; parsed by croniter, never by hand) into the
first due time, for ingress. ``ScheduleTimer`` scans the store every ``interval_s`` and
posts one ``ScheduleDue`` per schedule whose time has passed, with the next time of a cron
schedule computed from *now*.

Restart policy: schedules are in the log, so they come back with the state. A schedule that
came due while Spindle was down fires once, at the timer's first scan after start-up; a
cron schedule that missed several times fires once and is re-armed at its next time after
now (no burst of catch-up prompts).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

import trio
from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from threadspindle.runtime.core.actions import Action, ScheduleDue
from threadspindle.runtime.core.model import ThreadState
from threadspindle.runtime.core.transitions_schedule import MAX_AHEAD_S

__all__ = [
    "ScheduleTimer",
    "When",
    "WhenError",
    "local_timezone",
    "next_due",
    "parse_when",
    "split_when",
]

logger = logging.getLogger("spindle.schedules")

MAX_WHEN_WORDS = 5  # a cron expression's fields: the longest ``when`` split_when tries
_UNITS = {
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
    "y": 31536000, "yr": 31536000, "yrs": 31536000, "year": 31536000, "years": 31536000,
}  # fmt: skip
_DELAY_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)")
_CRON_START = re.compile(r"^[\d*@]")  # how a cron expression starts
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})\s*(am|pm)?$")
_ISO_FORMATS = ("%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S")


class WhenError(ValueError):
    """``when`` is no time, delay or cron expression; the message says what is accepted.
    ``rank``: how surely the text meant a ``when`` (0: no shape of one; 1: the shape of a
    delay or a cron expression, not valid; 2: a real time refused, in the past or too far
    ahead): ``split_when`` says the surest reason, not just the usage."""

    def __init__(self, message: str, rank: int = 0) -> None:
        super().__init__(message)
        self.rank = rank


@dataclass(frozen=True, slots=True)
class When:
    due_at: float  # the first time it fires (seconds since the epoch)
    cron: str | None  # a repeating schedule's expression
    label: str  # what the user wrote, as lists show it


HELP = (
    "When is a delay (`in 20m`, `in 2h`, `in 1h30m`, `in 3 days`), a time (`14:30`, "
    "`2:30pm`, `2026-12-01 09:00`) or a cron expression (`*/30 * * * *`, `0 9 * * 1-5`, "
    "`@daily`)."
)


def _delay(words: str) -> float | None:
    rest = words.strip().lower()
    if not rest:
        return None
    total = 0.0
    pos = 0
    for match in _DELAY_PART.finditer(rest):
        if rest[pos : match.start()].strip(" ,and"):
            return None
        unit = _UNITS.get(match.group(2))
        if unit is None:
            return None
        total += float(match.group(1)) * unit
        pos = match.end()
    if pos == 0 or rest[pos:].strip():
        return None
    return total


def _clock_time(text: str, now: datetime) -> datetime | None:
    match = _CLOCK.match(text.strip().lower())
    if match is None:
        return None
    hour, minute, half = int(match.group(1)), int(match.group(2)), match.group(3)
    if half is not None:
        if not 1 <= hour <= 12:
            raise WhenError(f"{text.strip()} is no time of day.", rank=2)
        hour = hour % 12 + (12 if half == "pm" else 0)
    if hour > 23 or minute > 59:
        raise WhenError(f"{text.strip()} is no time of day.", rank=2)
    due = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    return due if due > now else due + timedelta(days=1)  # the next such time


def parse_when(text: str, now: float, tz: tzinfo) -> When:
    """The first due time ``text`` means at ``now`` in time zone ``tz``; ``WhenError``."""
    when = " ".join(text.split())
    lowered = when.lower()
    local_now = datetime.fromtimestamp(now, tz)
    if lowered.startswith("in "):
        seconds = _delay(lowered[3:])
        if seconds is None:
            raise WhenError(f"{when!r} is no delay. {HELP}", rank=1)
        if seconds <= 0:
            raise WhenError(f"{when!r} is no time ahead: a delay is more than 0.", rank=2)
        if seconds > MAX_AHEAD_S:
            raise WhenError(f"{when!r} is more than 10 years ahead.", rank=2)
        return When(due_at=now + seconds, cron=None, label=when)
    clock = _clock_time(lowered, local_now)
    if clock is not None:
        return When(due_at=clock.timestamp(), cron=None, label=when)
    for fmt in _ISO_FORMATS:
        try:
            moment = datetime.strptime(when, fmt).replace(tzinfo=tz)
        except ValueError:
            continue
        if moment.timestamp() <= now:
            raise WhenError(f"{when} is in the past.", rank=2)
        if moment.timestamp() > now + MAX_AHEAD_S:
            raise WhenError(f"{when} is more than 10 years ahead.", rank=2)
        return When(due_at=moment.timestamp(), cron=None, label=when)
    if len(when.split()) == MAX_WHEN_WORDS or when.startswith("@"):
        try:
            return When(due_at=next_due(when, now, tz), cron=when, label=when)
        except (CroniterBadCronError, CroniterBadDateError, ValueError, KeyError) as exc:
            if _CRON_START.match(when):  # it looks like one: say why it is none
                raise WhenError(
                    f"{when!r} is no cron expression that comes due ({exc}). {HELP}", rank=1
                ) from None
    raise WhenError(f"{when!r} is no time, delay or cron expression. {HELP}")


def split_when(text: str, now: float, tz: tzinfo) -> tuple[When, str]:
    """Split ``<when> <prompt>`` (a console line, a Telegram message): the longest leading
    words that parse as a ``when``, and the prompt after them."""
    words = text.split()
    surest: WhenError | None = None  # the reason of the surest refused ``when``
    for n in range(min(MAX_WHEN_WORDS, len(words) - 1), 0, -1):
        try:
            when = parse_when(" ".join(words[:n]), now, tz)
        except WhenError as exc:
            if exc.rank and (surest is None or exc.rank > surest.rank):
                surest = exc
            continue
        return when, " ".join(words[n:])
    # "2020-01-01 09:00 x" is in the past; "in 0m x" no time ahead: said so, not the usage.
    raise surest or WhenError(f"usage: /schedule <when> <prompt>. {HELP}")


def local_timezone() -> tzinfo:
    """The machine's time zone: what ``14:30`` and cron fields mean by default."""
    return datetime.now().astimezone().tzinfo or UTC


def next_due(cron: str, after: float, tz: tzinfo) -> float:
    """The first time after ``after`` that ``cron`` names, in time zone ``tz``."""
    start = datetime.fromtimestamp(after, tz)
    return float(croniter(cron, start).get_next(datetime).timestamp())


class ScheduleTimer:
    """Posts ``ScheduleDue`` for every schedule whose time has passed (every thread, one
    task). A schedule is posted once per due time: a second scan before the actor took the
    first leaves it alone (and the core drops a second delivery anyway)."""

    def __init__(
        self,
        states: Callable[[], Mapping[str, ThreadState]],
        post: Callable[[Action], bool],
        *,
        clock: Callable[[], float],
        ids: Callable[[], str],
        tz: tzinfo,
        interval_s: float = 1.0,
    ) -> None:
        self._states = states  # the runtime's store is rebuilt at start-up: ask each time
        self._post = post
        self._clock = clock
        self._ids = ids
        self.tz = tz
        self.interval_s = interval_s
        self._posted: set[tuple[str, str, float]] = set()
        self.fired = 0

    def due_now(self) -> list[ScheduleDue]:
        """The ``ScheduleDue`` actions to post now (``post_due`` remembers them)."""
        now = self._clock()
        out: list[ScheduleDue] = []
        pending: set[tuple[str, str, float]] = set()
        for thread_id, state in self._states().items():
            for schedule in state.schedules:
                key = (thread_id, schedule.id, schedule.due_at)
                pending.add(key)
                if schedule.due_at > now or key in self._posted:
                    continue
                next_at = None
                if schedule.cron is not None:
                    try:
                        next_at = next_due(schedule.cron, now, self.tz)
                    except (CroniterBadCronError, ValueError, KeyError) as exc:
                        logger.warning(
                            "schedule %s: bad cron %r: %s", schedule.id, schedule.cron, exc
                        )
                out.append(
                    ScheduleDue(
                        thread_id=thread_id,
                        action_id=self._ids(),
                        at=now,
                        schedule_id=schedule.id,
                        due_at=schedule.due_at,
                        next_due_at=next_at,
                    )
                )
        self._posted &= pending  # forget what fired (or was cancelled) for good
        return out

    def post_due(self) -> int:
        """Post what is due now; a post the runtime refuses (the thread is being disposed,
        the runtime is closing) is tried again at the next scan. Returns how many went."""
        posted = 0
        for action in self.due_now():
            if self._post(action):
                self._posted.add((action.thread_id, action.schedule_id, action.due_at))
                posted += 1
        self.fired += posted
        return posted

    async def run(self) -> None:
        while True:
            self.post_due()
            await trio.sleep(self.interval_s)

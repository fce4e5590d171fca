"""Handlers for scheduled prompts, agent wake-ups, verbosity and the thread's title.

Schedules live in ``ThreadState.schedules`` (so in the log: they survive restarts and
replay). The core never reads a clock: ingress computes a schedule's first ``due_at``,
the runtime's timer (``runtime.live.schedules``) posts ``ScheduleDue`` with the due time
the state holds and, for cron, the next one. A due schedule fires through the same path
as a user's ``/queue`` (a non-interrupting queue item); a duplicate or late ``ScheduleDue``
for a time that already fired changes nothing, so each due time fires at most once.
"""

from __future__ import annotations

import time

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core import effect_types as F
from threadspindle.runtime.core.model import QueueItem, Schedule
from threadspindle.runtime.core.transition_step import Step
from threadspindle.runtime.core.transitions_user import _enqueue

__all__ = [
    "cancel_wakeups",
    "format_due",
    "on_schedule_added",
    "on_schedule_cancelled",
    "on_schedule_due",
    "on_schedules_listed",
    "on_title_changed",
    "on_verbosity_set",
]

SCHEDULE_LIMIT = 20  # schedules (and wake-ups) a thread may hold at once
# An agent's wake-ups are its own turns, with nobody asking: each may schedule the next.
# A wake-up is due a minute ahead at the soonest, and after this many in a row with no
# person writing in the thread the next is refused (a loop of wake-ups 60 ms apart wrote
# 1 MB/s to the log and ran turns until someone noticed). "Check the CI every 20
# minutes" goes on for 16 hours; a message in the thread lets it go on.
MIN_WAKEUP_S = 60.0
WAKEUP_CHAIN_LIMIT = 50
PREVIEW_CHARS = 80  # a schedule's prompt as lists and notices show it
# The furthest a schedule may be due: past it, no date can be shown (``gmtime`` of a
# year past 9999 fails) and no process runs that long anyway.
MAX_AHEAD_S = 10 * 366 * 86400
TITLE_CHARS = 100  # Discord's limit for a thread name


def format_due(at: float) -> str:
    """A due time as the core shows it: UTC, to the minute (pure: no time zone lookup)."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(at))


def _preview(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= PREVIEW_CHARS else one_line[:PREVIEW_CHARS] + "…"


def _notice(step: Step, key_part: str, text: str) -> None:
    """A thread notice that answers no command (the timer, the agent): keyed by the
    action, so a replay posts nothing twice."""
    step.emit(
        F.PostOutput(
            key=f"{step.thread}/{key_part}/{step.action.action_id}", kind="notice", text=text
        )
    )


def on_schedule_added(step: Step, a: A.ScheduleAdded) -> None:
    state = step.state
    if len(state.schedules) >= SCHEDULE_LIMIT:
        text = f"This thread already has {SCHEDULE_LIMIT} schedules: /schedule cancel one first."
        if a.wakeup:
            step.record("schedule limit reached: wake-up refused", "rejected")
            _notice(step, "schedule", f"⚠ The agent's wake-up was refused. {text}")
        else:
            step.refuse(text, "schedule limit reached", "rejected")
        return
    if not a.text.strip():
        step.refuse("A schedule needs a prompt: /schedule <when> <prompt>.", "empty schedule")
        return
    if not a.due_at <= a.at + MAX_AHEAD_S:  # (NaN too)
        step.refuse("A schedule may be due at most 10 years ahead.", "schedule too far ahead")
        return
    due_at = a.due_at
    if a.wakeup:
        chained = state.counters.wakeups_unattended
        if chained >= WAKEUP_CHAIN_LIMIT:
            step.record("wake-up chain limit reached: wake-up refused", "rejected")
            _notice(
                step,
                "schedule",
                f"⚠ The agent's wake-up was refused: it has woken itself {chained} times "
                "since anyone wrote in this thread. Write here to let it go on.",
            )
            return
        step.count("wakeups_unattended")
        due_at = max(due_at, a.at + MIN_WAKEUP_S)
    sid = f"s{state.counters.schedules + 1}"
    step.count("schedules")
    schedule = Schedule(
        id=sid,
        text=a.text,
        author_id=a.author_id,
        author_name=a.author_name,
        due_at=due_at,
        cron=a.cron,
        label=a.label,
        wakeup=a.wakeup,
        created_at=a.at,
    )
    step.set(schedules=state.schedules + (schedule,))
    when = f"{a.label} · " if a.label else ""
    if a.wakeup:
        _notice(
            step,
            "schedule",
            f"⏰ The agent will be woken up at {format_due(due_at)} ({sid}): "
            f"{_preview(a.text)}\n-# A message in this thread cancels it.",
        )
    else:
        repeat = " (repeats)" if a.cron else ""
        step.reply(
            f"⏰ Scheduled {sid}{repeat}: {when}next at {format_due(a.due_at)}: "
            f"{_preview(a.text)}\n-# /schedule cancel {sid} to drop it."
        )


def on_schedule_cancelled(step: Step, a: A.ScheduleCancelled) -> None:
    kept = tuple(s for s in step.state.schedules if s.id != a.schedule_id)
    if len(kept) == len(step.state.schedules):
        step.refuse(
            f"No schedule {a.schedule_id} in this thread (see /schedule list).",
            "cancel of an unknown schedule",
        )
        return
    step.set(schedules=kept)
    step.reply(f"Cancelled schedule {a.schedule_id}.")


def on_schedules_listed(step: Step, a: A.SchedulesListed) -> None:
    schedules = step.state.schedules
    if not schedules:
        step.reply("No schedules in this thread.", ephemeral=True)
        return
    lines = [f"Schedules ({len(schedules)}):"]
    for s in sorted(schedules, key=lambda s: (s.due_at, s.id)):
        kind = "wake-up" if s.wakeup else (f"cron `{s.cron}`" if s.cron else "once")
        lines.append(f"  {s.id} · {format_due(s.due_at)} · {kind}: {_preview(s.text)}")
    step.reply("\n".join(lines), ephemeral=True)


def on_schedule_due(step: Step, a: A.ScheduleDue) -> None:
    schedules = step.state.schedules
    found = next((s for s in schedules if s.id == a.schedule_id), None)
    if found is None:
        step.record(f"due of schedule {a.schedule_id}, which is gone (fired or cancelled)")
        return
    if found.due_at != a.due_at:
        step.record(f"schedule {a.schedule_id} already fired for {a.due_at}", "duplicates")
        return
    step.count("schedules_fired")
    rearm = found.cron is not None and a.next_due_at is not None and a.next_due_at > a.due_at
    if rearm:
        assert a.next_due_at is not None
        step.set(
            schedules=tuple(s.replace(due_at=a.next_due_at) if s is found else s for s in schedules)
        )
        after = f" Next at {format_due(a.next_due_at)}."
    else:
        step.set(schedules=tuple(s for s in schedules if s is not found))
        after = ""
    what = "The agent's wake-up" if found.wakeup else f"Schedule {found.id}"
    _notice(step, "schedule", f"⏰ {what} is due: {_preview(found.text)}.{after}")
    item = QueueItem(
        id=f"{found.id}@{a.action_id}",
        author_id=found.author_id,
        author_name=found.author_name or ("wake-up" if found.wakeup else "schedule"),
        text=found.text,
        from_queue=True,
        queued_at=a.at,
    )
    # The same path as a user's /queue: never interrupts, waits behind what is queued.
    _enqueue(step, item, interrupt=False, confirm=False)


def cancel_wakeups(step: Step) -> None:
    """A user wrote in the thread: the agent's pending wake-ups are void (the user is
    there now), and its chain of wake-ups starts again from none. Said in the thread, so
    the agent's promise does not vanish silently."""
    if step.state.counters.wakeups_unattended:
        step.set(counters=step.state.counters.replace(wakeups_unattended=0))
    wakeups = [s for s in step.state.schedules if s.wakeup]
    if not wakeups:
        return
    step.set(schedules=tuple(s for s in step.state.schedules if not s.wakeup))
    ids = ", ".join(s.id for s in wakeups)
    _notice(step, "wakeup-cancelled", f"⏰ Cancelled the agent's wake-up ({ids}): you wrote first.")


def on_verbosity_set(step: Step, a: A.VerbositySet) -> None:
    step.set(verbosity=a.verbosity)
    meaning = {
        "text": "only the answer",
        "tools": "the answer and one line per tool call",
        "all": "everything (thinking, tool output)",
    }[a.verbosity]
    step.reply(f"Verbosity: {a.verbosity} — runs show {meaning}.")


def on_title_changed(step: Step, title: str) -> None:
    """The agent named its session: the thread follows (the renderer paces the renames)."""
    # One line of printable text: the agent chose it, and a NUL or an escape sequence in a
    # thread name is refused by some platforms and garbles a terminal on the console.
    clean = " ".join("".join(c if c.isprintable() else " " for c in title).split())
    clean = clean[:TITLE_CHARS]
    if not clean or clean == step.state.title:
        step.note = "title unchanged"
        return
    step.set(title=clean)
    step.emit(F.RenameThread(title=clean))

"""Scheduled prompts in the live runtime: parsing *when*, the timer firing a schedule through
the /queue path, cron re-arming, and the restart policy (a schedule that came due while
Spindle was down fires once at start, and never again)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import trio
from runtime_harness import Chat, running, until

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.live.schedules import WhenError, next_due, parse_when, split_when

NOW = datetime(2026, 11, 25, 10, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("when", "due", "cron"),
    [
        ("in 2h", NOW + 7200, None),
        ("in 20 minutes", NOW + 1200, None),
        ("in 1h30m", NOW + 5400, None),
        ("in 3 days", NOW + 3 * 86400, None),
        ("14:30", datetime(2026, 11, 25, 14, 30, tzinfo=UTC).timestamp(), None),
        ("9:15", datetime(2026, 11, 26, 9, 15, tzinfo=UTC).timestamp(), None),  # tomorrow
        ("2:30pm", datetime(2026, 11, 25, 14, 30, tzinfo=UTC).timestamp(), None),
        ("2026-12-01 09:00", datetime(2026, 12, 1, 9, 0, tzinfo=UTC).timestamp(), None),
        ("*/30 * * * *", datetime(2026, 11, 25, 10, 30, tzinfo=UTC).timestamp(), "*/30 * * * *"),
        ("0 9 * * 1-5", datetime(2026, 11, 26, 9, 0, tzinfo=UTC).timestamp(), "0 9 * * 1-5"),
        ("@daily", datetime(2026, 11, 26, 0, 0, tzinfo=UTC).timestamp(), "@daily"),
    ],
)
def test_parse_when(when: str, due: float, cron: str | None) -> None:
    parsed = parse_when(when, NOW, UTC)
    assert (parsed.due_at, parsed.cron, parsed.label) == (due, cron, when)


@pytest.mark.parametrize(
    "when",
    [
        "soon",
        "in",
        "in 2 parsecs",
        "25:00",
        "2020-01-01 09:00",
        "* * *",
        "61 * * * *",
        "in 999999999999999999999 days",  # more than 10 years ahead (it crashed the core)
        "in 4000 days",
        "2040-01-01 09:00",
    ],
)
def test_parse_when_refuses_what_is_no_time(when: str) -> None:
    with pytest.raises(WhenError):
        parse_when(when, NOW, UTC)


def test_split_when_takes_the_longest_leading_when() -> None:
    when, prompt = split_when("in 20 minutes check the CI again", NOW, UTC)
    assert (when.due_at, prompt) == (NOW + 1200, "check the CI again")
    when, prompt = split_when("*/5 * * * * run the tests", NOW, UTC)
    assert (when.cron, prompt) == ("*/5 * * * *", "run the tests")
    with pytest.raises(WhenError):
        split_when("in 2h", NOW, UTC)  # no prompt


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("2020-01-01 09:00 x", "2020-01-01 09:00 is in the past."),
        ("2040-12-31 23:59 y", "2040-12-31 23:59 is more than 10 years ahead."),
        ("in 11 years far", "'in 11 years' is more than 10 years ahead."),
        ("25:00 bad", "25:00 is no time of day."),
        ("13:00pm bad", "13:00pm is no time of day."),
        ("0 0 30 2 * feb30", "'0 0 30 2 *' is no cron expression that comes due"),
        ("in 0m now", "'in 0m' is no time ahead: a delay is more than 0."),
        ("in 2 parsecs go", "'in 2 parsecs' is no delay."),
        ("tomorrow do it", "usage: /schedule <when> <prompt>."),
    ],
)
def test_split_when_says_why_a_when_is_refused(line: str, reason: str) -> None:
    # Every refusal read "usage: ...": a date in the past, a day that never comes, a
    # delay of nothing were never said.
    with pytest.raises(WhenError) as refused:
        split_when(line, NOW, UTC)
    assert str(refused.value).startswith(reason)


def test_next_due_follows_the_cron_expression_in_its_time_zone() -> None:
    assert next_due("0 * * * *", NOW, UTC) == NOW + 3600
    assert next_due("0 * * * *", NOW + 1, UTC) == NOW + 3600


def _schedule(chat: Chat, text: str, due_at: float, cron: str | None = None, **kw) -> A.Action:
    return A.ScheduleAdded(
        **chat._base(),
        author_id="u1",
        author_name="alice",
        text=text,
        due_at=due_at,
        cron=cron,
        **kw,
    )


async def test_the_timer_fires_a_schedule_through_the_queue(tmp_path: Path, autojump_clock) -> None:
    async with running(tmp_path, schedule_interval_s=1.0) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.send(_schedule(chat, "scheduled hello", trio.current_time() + 30))
        await trio.sleep(10)
        assert rt.agents.delivered == []  # not yet
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        assert [text for _, text in rt.agents.delivered] == ["scheduled hello"]
        assert rt.snapshot("t1").schedules == ()
        notices = rt.chat.texts("t1", "notice")
        assert any("Schedule s1 is due" in n for n in notices)
        await trio.sleep(120)
        assert len(rt.agents.delivered) == 1  # fired once


async def test_a_cron_schedule_fires_again_and_a_user_message_cancels_a_wakeup(
    tmp_path: Path, autojump_clock
) -> None:
    async with running(tmp_path, schedule_interval_s=1.0) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        start = trio.current_time()
        await chat.send(_schedule(chat, "every minute", start + 60, cron="* * * * *"))
        await chat.send(_schedule(chat, "wake me", start + 600, wakeup=True))
        await until(lambda: rt.snapshot("t1").counters.completed == 2, timeout=200)
        assert [t for _, t in rt.agents.delivered] == ["every minute", "every minute"]
        assert [s.id for s in rt.snapshot("t1").schedules] == ["s1", "s2"]
        await chat.say("I'm here")
        await until(lambda: [s.id for s in rt.snapshot("t1").schedules] == ["s1"])
        await chat.send(A.ScheduleCancelled(**chat._base(), schedule_id="s1"))
        await trio.sleep(1000)
        texts = [t for _, t in rt.agents.delivered]
        assert "wake me" not in texts and texts.count("every minute") <= 3


async def test_a_schedule_due_while_down_fires_once_at_start(
    tmp_path: Path, autojump_clock
) -> None:
    base = 1_000_000.0
    now = [base]
    async with running(tmp_path, clock=lambda: now[0]) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.send(_schedule(chat, "while you were away", base + 3600))
        await chat.send(_schedule(chat, "hourly", base + 600, cron="0 * * * *"))
        await rt.wait_quiet()
    now[0] = base + 5 * 3600 + 60  # Spindle was down for five hours
    async with running(tmp_path, clock=lambda: now[0]) as rt:
        await until(lambda: rt.snapshot("t1").counters.completed == 2)
        texts = sorted(t for _, t in rt.agents.delivered)
        assert texts == ["hourly", "while you were away"]  # each once, not once per hour
        (hourly,) = rt.snapshot("t1").schedules
        assert hourly.due_at > now[0] and hourly.due_at == next_due(
            "0 * * * *", now[0], rt.timezone
        )
        await trio.sleep(30)
        assert len(rt.agents.delivered) == 2
    async with running(tmp_path, clock=lambda: now[0]) as rt:  # and a third start: nothing
        await trio.sleep(30)
        assert rt.agents.delivered == []
        assert [s.text for s in rt.snapshot("t1").schedules] == ["hourly"]

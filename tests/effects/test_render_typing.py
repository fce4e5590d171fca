"""effects.render_typing: the typing indicator alone, over the retrying recording platform,
in trio's mock time (``autojump_clock``)."""

from __future__ import annotations

import math

import trio

from threadspindle.effects.platform import PlatformError, PlatformLimits
from threadspindle.effects.render_outputs import RenderTally
from threadspindle.effects.render_typing import TypingIndicator
from threadspindle.effects.retrying_platform import RetryingPlatform
from threadspindle.testkit.recording_platform import RecordingPlatform

CHANNEL = "c"


def indicator(platform: RecordingPlatform) -> tuple[TypingIndicator, RenderTally]:
    tally = RenderTally()
    typing = TypingIndicator(
        RetryingPlatform(platform), CHANNEL, tally, clock=trio.current_time, after_post_s=1.0
    )
    return typing, tally


def typing_times(platform: RecordingPlatform) -> list[float]:
    return [call.at for call in platform.calls_of("typing")]


async def test_turning_on_shows_it_once_and_the_refresh_keeps_it(autojump_clock: object) -> None:
    platform = RecordingPlatform(PlatformLimits(typing_refresh_s=8.0))
    typing, tally = indicator(platform)
    assert typing.deadline() == math.inf
    await typing.turn_on()
    await typing.turn_on()  # already on: its refreshes keep it shown
    assert typing_times(platform) == [0.0] and typing.deadline() == 8.0
    await trio.sleep(7.9)
    await typing.refresh_if_due(trio.current_time())  # not due yet: no call
    await trio.sleep_until(typing.deadline())
    await typing.refresh_if_due(trio.current_time())
    assert typing_times(platform) == [0.0, 8.0] and typing.deadline() == 16.0
    assert tally.typing_calls == 2


async def test_a_post_brings_the_next_refresh_forward(autojump_clock: object) -> None:
    platform = RecordingPlatform()
    typing, _ = indicator(platform)
    typing.after_post()  # off: nothing to show again
    assert typing.deadline() == math.inf
    await typing.turn_on()
    await trio.sleep(3.0)
    typing.after_post()
    assert typing.deadline() == 4.0
    await trio.sleep(2.0)
    typing.after_post()  # never later than the refresh already due
    assert typing.deadline() == 4.0


async def test_turning_off_makes_no_call_and_stops_the_refreshes(autojump_clock: object) -> None:
    platform = RecordingPlatform()
    typing, _ = indicator(platform)
    await typing.turn_on()
    await typing.turn_off()
    assert typing.deadline() == math.inf and not typing.on
    await trio.sleep(30.0)
    await typing.refresh_if_due(trio.current_time())
    assert typing_times(platform) == [0.0]
    await typing.turn_on()  # on again: shown at once
    assert typing_times(platform) == [0.0, 30.0]


async def test_a_failure_is_not_raised_and_the_next_refresh_tries_again(
    autojump_clock: object,
) -> None:
    platform = RecordingPlatform()
    platform.inject(lambda: PlatformError("503", retryable=True), kind="typing")
    retrying = RetryingPlatform(platform)
    tally = RenderTally()
    typing = TypingIndicator(retrying, CHANNEL, tally, clock=trio.current_time, after_post_s=1.0)
    await typing.turn_on()
    assert tally.typing_calls == 0 and retrying.statistics().gave_up == 1
    assert typing.deadline() == 8.0  # no retry now: typing is cosmetic
    await trio.sleep_until(typing.deadline())
    await typing.refresh_if_due(trio.current_time())
    assert typing_times(platform) == [8.0] and tally.typing_calls == 1

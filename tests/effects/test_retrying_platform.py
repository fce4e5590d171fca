"""effects.retrying_platform: the retry policy alone, over the recording platform's injected
faults, in trio's mock time (``autojump_clock``: waits are instant, call times exact)."""

from __future__ import annotations

import pytest
import trio

from threadspindle.effects.platform import ChatPlatform, PlatformError
from threadspindle.effects.retrying_platform import (
    RetryingPlatform,
    RetryPolicy,
    RetryStatistics,
)
from threadspindle.testkit.recording_platform import RecordingPlatform

CHANNEL = "c"


def attempt_times(platform: RecordingPlatform, kind: str) -> list[float]:
    return [call.at for call in platform.calls if call.kind == kind]


def gaps(times: list[float]) -> list[float]:
    return [round(b - a, 3) for a, b in zip(times, times[1:], strict=False)]


async def test_it_is_a_chat_platform_with_the_wrapped_limits() -> None:
    platform = RecordingPlatform()
    wrapped: ChatPlatform = RetryingPlatform(platform)
    assert wrapped.limits is platform.limits
    assert await wrapped.send(CHANNEL, "hi") == "m1"
    assert platform.texts(CHANNEL) == ["hi"]


async def test_a_429_waits_its_retry_after_exactly(autojump_clock: object) -> None:
    platform = RecordingPlatform()
    platform.rate_limit(kind="send", retry_after=3.0, times=2)
    retrying = RetryingPlatform(platform)
    message_id = await retrying.send(CHANNEL, "hello")
    assert gaps(attempt_times(platform, "send")) == [3.0, 3.0]
    assert platform.message(CHANNEL, message_id).text == "hello"
    assert retrying.statistics() == RetryStatistics(attempts=3, retries=2, rate_limited=2)


async def test_a_negative_retry_after_is_no_wait(autojump_clock: object) -> None:
    platform = RecordingPlatform()
    platform.rate_limit(kind="edit", retry_after=-5.0)
    retrying = RetryingPlatform(platform)
    message_id = await platform.send(CHANNEL, "a")
    await retrying.edit(CHANNEL, message_id, "b")
    assert gaps(attempt_times(platform, "edit")) == [0.0]
    assert platform.texts(CHANNEL) == ["b"]


async def test_5xx_backs_off_doubling_up_to_the_cap(autojump_clock: object) -> None:
    platform = RecordingPlatform()
    platform.server_error(kind="send", times=5)
    retrying = RetryingPlatform(platform, RetryPolicy(backoff_s=0.5, max_backoff_s=2.0))
    await retrying.send(CHANNEL, "hello")
    assert gaps(attempt_times(platform, "send")) == [0.5, 1.0, 2.0, 2.0, 2.0]
    assert retrying.statistics() == RetryStatistics(attempts=6, retries=5)


async def test_retries_are_bounded_and_the_last_error_is_raised(autojump_clock: object) -> None:
    platform = RecordingPlatform()
    platform.server_error(kind="send", times=100)
    retrying = RetryingPlatform(platform)
    started = trio.current_time()
    with pytest.raises(PlatformError, match="503 Service Unavailable") as caught:
        await retrying.send(CHANNEL, "hello")
    assert caught.value.retryable
    assert trio.current_time() - started == 0.5 + 1 + 2 + 4 + 8
    assert retrying.statistics() == RetryStatistics(attempts=6, retries=5, gave_up=1)
    assert platform.texts(CHANNEL) == []


async def test_a_permanent_refusal_is_raised_at_once(autojump_clock: object) -> None:
    platform = RecordingPlatform()
    platform.inject(lambda: PlatformError("403 Missing Permissions"), kind="send")
    retrying = RetryingPlatform(platform)
    with pytest.raises(PlatformError, match="403"):
        await retrying.send(CHANNEL, "hello")
    assert trio.current_time() == 0.0
    assert retrying.statistics() == RetryStatistics(attempts=1, gave_up=1)


async def test_429s_past_their_bound_are_backed_off_as_server_errors(
    autojump_clock: object,
) -> None:
    platform = RecordingPlatform()
    platform.rate_limit(kind="send", retry_after=10.0, times=3)
    retrying = RetryingPlatform(platform, RetryPolicy(max_rate_limit_waits=1, max_server_retries=1))
    with pytest.raises(PlatformError, match="429"):
        await retrying.send(CHANNEL, "hello")
    assert gaps(attempt_times(platform, "send")) == [10.0, 0.5]
    assert retrying.statistics() == RetryStatistics(
        attempts=3, retries=2, rate_limited=1, gave_up=1
    )


@pytest.mark.parametrize("kind", ["edit", "delete", "reply"])
async def test_every_call_but_typing_goes_through_the_same_loop(
    kind: str, autojump_clock: object
) -> None:
    platform = RecordingPlatform()
    message_id = await platform.send(CHANNEL, "a")
    platform.server_error(kind=kind, times=2)
    platform.rate_limit(kind=kind, nth=3, retry_after=4.0)
    retrying = RetryingPlatform(platform)
    if kind == "edit":
        await retrying.edit(CHANNEL, message_id, "b")
    elif kind == "delete":
        await retrying.delete(CHANNEL, message_id)
    else:
        await retrying.reply(CHANNEL, "action1", "done", ephemeral=True)
    assert gaps(attempt_times(platform, kind)) == [0.5, 1.0, 4.0]
    assert retrying.statistics() == RetryStatistics(attempts=4, retries=3, rate_limited=1)


async def test_typing_is_tried_once(autojump_clock: object) -> None:
    platform = RecordingPlatform()
    platform.rate_limit(kind="typing", retry_after=5.0)
    platform.server_error(kind="typing", nth=2)
    retrying = RetryingPlatform(platform)
    for _ in range(2):
        with pytest.raises(PlatformError):
            await retrying.typing(CHANNEL)
    await retrying.typing(CHANNEL)
    assert attempt_times(platform, "typing") == [0.0, 0.0, 0.0]
    assert retrying.statistics() == RetryStatistics(attempts=3, gave_up=2)


async def test_a_retried_send_whose_answer_was_lost_is_posted_once(
    autojump_clock: object,
) -> None:
    platform = RecordingPlatform()
    platform.server_error(kind="send", after_effect=True)
    retrying = RetryingPlatform(platform)
    message_id = await retrying.send(CHANNEL, "once", nonce="n-1")
    assert platform.count("send", ok_only=False) == 2
    assert [m.id for m in platform.messages(CHANNEL)] == [message_id]


async def test_a_broken_platform_is_not_retried_nor_counted(autojump_clock: object) -> None:
    platform = RecordingPlatform()

    async def broken_delete(channel_id: str, message_id: str) -> None:
        raise KeyError("bug")

    platform.delete = broken_delete  # type: ignore[method-assign]
    retrying = RetryingPlatform(platform)
    with pytest.raises(KeyError):
        await retrying.delete(CHANNEL, "m1")
    assert retrying.statistics() == RetryStatistics(attempts=1)


async def test_the_callers_cancel_scope_ends_a_long_wait(autojump_clock: object) -> None:
    platform = RecordingPlatform()
    platform.rate_limit(kind="send", retry_after=60.0)
    retrying = RetryingPlatform(platform)
    with trio.move_on_after(5.0) as scope:
        await retrying.send(CHANNEL, "hello")
    assert scope.cancelled_caught and trio.current_time() == 5.0
    assert platform.texts(CHANNEL) == []

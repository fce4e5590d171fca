"""Renderers sharing one ``RequestBudget`` (``effects.thread_renderers``): a paced edit waits
for its token without holding its thread's renderer, shows the latest text when it goes,
replies and prompts go first, the threads take turns; in trio's mock time over the
recording platform."""

from __future__ import annotations

import trio

from threadspindle.effects.platform import PlatformError
from threadspindle.effects.request_budget import BudgetLimits, ChannelRule, Priority
from threadspindle.effects.thread_renderers import ThreadRenderers
from threadspindle.runtime.core.effect_types import (
    AppendOutput,
    PostOutput,
    ReplyToCommand,
    SealOutput,
    ShowPermissionPrompt,
    Typing,
)
from threadspindle.testkit.recording_platform import RecordingPlatform

# 10 requests a second in all; 5 edits per 5 s per channel (Discord's shape, scaled down).
TIGHT = BudgetLimits(
    requests=10,
    window_s=1.0,
    margin_s=0.0,
    reserve=2,
    channel_rules=(ChannelRule(kinds=("edit",), limit=5, per_s=5.0),),
)


def most_in_any_window(times: list[float], span: float) -> int:
    times = sorted(times)
    return max((sum(1 for t in times if s <= t < s + span) for s in times), default=0)


async def stream_into(renderers: ThreadRenderers, thread: str, deltas: int, every: float) -> str:
    """One answer streamed into ``thread``, ``deltas`` pieces ``every`` seconds; sealed."""
    renderer = renderers.renderer(thread)
    key = f"{thread}/answer"
    text = f"{thread}: "
    await renderer.apply(PostOutput(key=key, kind="text", text=text))
    for seq in range(1, deltas + 1):
        await trio.sleep(every)
        piece = f"w{seq} "
        text += piece
        await renderer.apply(AppendOutput(key=key, seq=seq, text=piece))
    await renderer.apply(SealOutput(key=key))
    return text


async def test_many_threads_stay_within_the_budget_and_show_exactly_their_answers(
    autojump_clock: object,
) -> None:
    platform = RecordingPlatform()
    async with ThreadRenderers(budget=TIGHT) as renderers:
        renderers.attach(platform)
        answers: dict[str, str] = {}

        async def one(thread: str) -> None:
            answers[thread] = await stream_into(renderers, thread, deltas=200, every=0.05)

        async with trio.open_nursery() as nursery:
            for n in range(20):
                nursery.start_soon(one, f"t{n}")
        await renderers.flush()
        await trio.sleep(10)  # the background tasks still in line get their tokens back
        budget = renderers.budget
        assert budget is not None
        stats = budget.statistics()
    times = [call.at for call in platform.calls]
    assert most_in_any_window(times, 1.0) <= 10  # never over the connection's budget
    for n in range(20):
        thread = f"t{n}"
        edits = [c.at for c in platform.calls if c.channel_id == thread and c.kind == "edit"]
        assert most_in_any_window(edits, 5.0) <= 5  # nor over a channel's edit rule
        assert platform.texts(thread) == [answers[thread]]  # the final text, exactly
    assert stats.granted == len(platform.calls) and stats.waiting == 0
    assert stats.in_window == 0  # every token released or refunded: none held for ever


async def test_the_threads_take_turns_so_none_falls_far_behind(autojump_clock: object) -> None:
    """20 threads streaming for 10 s over a budget that allows 6 edits a second: every
    thread has its turns, none is left out for long."""
    platform = RecordingPlatform()
    async with ThreadRenderers(budget=TIGHT) as renderers:
        renderers.attach(platform)
        async with trio.open_nursery() as nursery:
            for n in range(20):
                nursery.start_soon(stream_into, renderers, f"t{n}", 200, 0.05)
        await renderers.flush()
    counts, worst_gap, last = [], 0.0, 0.0
    for n in range(20):
        touches = sorted(
            c.at for c in platform.calls if c.channel_id == f"t{n}" and c.kind in ("send", "edit")
        )
        streaming = [t for t in touches if t <= 10.0]  # the agents stream until t = 10 s
        counts.append(len(streaming))
        gaps = [b - a for a, b in zip(streaming, streaming[1:], strict=False)]
        worst_gap = max([worst_gap, *gaps])
        last = max(last, touches[-1])
    # Every thread had its turns while streaming (its first send: 20 sends at 8 a second,
    # so by 2.5 s; then an edit a turn) ...
    assert min(counts) >= 2 and sum(counts) >= 20 + 6 * (10 - 3)
    # 6 edit tokens a second (10, less the reserve of the two classes above) for 20
    # threads: a thread's turn comes every 20/6 s after its edit fell due (0.5 s after the
    # last one), give or take one window.
    assert worst_gap <= 20 / 6 + 0.5 + 1.0
    # The 20 final texts are edits in the threads' turns (6 a second) once the streams end:
    # a thread whose turn came just before its end waits one more round (and a window).
    assert last <= 10.0 + 20 / 6 + 1.5


async def test_a_waiting_edit_coalesces_every_delta_into_one_call_with_the_latest_text(
    autojump_clock: object,
) -> None:
    platform = RecordingPlatform()
    async with ThreadRenderers(budget=TIGHT) as renderers:
        renderers.attach(platform)
        budget = renderers.budget
        assert budget is not None
        renderer = renderers.renderer("t")
        await renderer.apply(PostOutput(key="k", kind="text", text="start "))
        await trio.sleep(1)  # the first message is sent
        for n in range(7):  # spend the whole window: the edit must wait for the next one
            await budget.acquire(Priority.URGENT, f"other{n}", "reply")
            budget.release(f"other{n}", "reply")  # a call that took no time
        await renderer.apply(AppendOutput(key="k", seq=1, text="one "))
        await trio.sleep(0.6)  # its edit is due and waiting for a token
        assert budget.statistics().waiting_by_priority[2] == 1
        for seq, word in enumerate(("two ", "three ", "four "), start=2):
            await renderer.apply(AppendOutput(key="k", seq=seq, text=word))
        await trio.sleep(1)
        edits = platform.calls_of("edit")
        assert [c.text for c in edits] == ["start one two three four "]
        await renderer.apply(SealOutput(key="k"))


async def test_a_reply_and_a_prompt_do_not_wait_behind_their_threads_edits(
    autojump_clock: object,
) -> None:
    platform = RecordingPlatform()
    async with ThreadRenderers(budget=TIGHT) as renderers:
        renderers.attach(platform)
        budget = renderers.budget
        assert budget is not None
        renderer = renderers.renderer("t")
        await renderer.apply(PostOutput(key="k", kind="text", text="start "))
        await trio.sleep(1)
        for n in range(8):  # every token the edits may take, and more
            await budget.acquire(Priority.URGENT, f"other{n}", "reply")
            budget.release(f"other{n}", "reply")  # a call that took no time
        await renderer.apply(AppendOutput(key="k", seq=1, text="more "))
        await trio.sleep(0.6)
        assert budget.statistics().waiting_by_priority[2] == 1  # the edit waits, unlocked
        asked = trio.current_time()
        await renderer.apply(ReplyToCommand(key="r", action_id="a1", text="queued"))
        await renderer.apply(
            ShowPermissionPrompt(key="p", request_id="q1", tool="Bash", detail="ls")
        )
        assert trio.current_time() == asked  # both at once, from the reserve
        assert platform.count("reply") == 1 and platform.count("edit") == 0
        await renderer.apply(SealOutput(key="k"))


async def test_a_reply_queued_behind_its_threads_seal_lifts_the_seal_ahead_of_other_posts(
    autojump_clock: object,
) -> None:
    """The thread's chat lane settles a seal whose final text waits for its turn among the
    streaming threads (a ``final`` ``EDIT``, ahead of the thread's own paced edit), and a
    reply is queued behind it: ``expedite`` (the reactor's word) lifts the waiting final
    text to ``URGENT``, and the renderer's later posts ask at ``URGENT`` until the reply is
    applied (``expedite(-1)``). The budget is spent, so the footer rides in the final edit."""
    platform = RecordingPlatform()
    async with ThreadRenderers(budget=TIGHT) as renderers:
        renderers.attach(platform)
        budget = renderers.budget
        assert budget is not None
        renderer = renderers.renderer("t")
        await renderer.apply(PostOutput(key="k", kind="text", text="start "))
        await trio.sleep(2)  # the first message is sent, and its token back
        spent_at = trio.current_time()
        for n in range(10):  # the whole window
            await budget.acquire(Priority.URGENT, f"other{n}", "reply")
            budget.release(f"other{n}", "reply")
        await renderer.apply(AppendOutput(key="k", seq=1, text="end "))
        await trio.sleep(0.6)  # its paced edit waits for a token (unlocked)
        others: list[float] = []

        async def other_post(channel: str) -> None:
            await budget.acquire(Priority.POST, channel, "send")
            others.append(trio.current_time())
            budget.release(channel, "send")

        async def end_the_run() -> None:
            await renderer.apply(SealOutput(key="k"))  # settled by the next effect
            await renderer.apply(PostOutput(key="f", kind="footer", text="done"))

        async with trio.open_nursery() as nursery:
            for n in range(16):  # two windows' worth of other threads' posts
                nursery.start_soon(other_post, f"p{n}")
            await trio.sleep(0.1)
            nursery.start_soon(end_the_run)  # waits behind them
            await trio.sleep(0.1)
            assert budget.statistics().waiting_by_priority == (0, 16, 2)
            renderer.expedite(1)  # a reply was committed behind the seal
            assert budget.statistics().waiting_by_priority == (1, 16, 1)
        (final,) = [c for c in platform.calls_of("edit") if c.text.startswith("start end ")]
        assert final.text == "start end \n-# done"  # the footer rode in the final edit
        assert platform.count("send") == 1
        assert final.at == spent_at + 1.0  # the first token back, before any other post
        assert min(others) == final.at and max(others) >= spent_at + 2.0
        assert budget.statistics().granted_by_priority[0] == 10 + 1  # the final text
        await renderer.apply(PostOutput(key="g", kind="footer", text="again"))
        assert budget.statistics().granted_by_priority[0] == 12  # a post behind the reply
        renderer.expedite(-1)
        await renderer.apply(PostOutput(key="h", kind="footer", text="and again"))
        assert budget.statistics().granted_by_priority[0] == 12  # back at POST


async def test_typing_is_skipped_when_the_budget_has_no_token_to_spare(
    autojump_clock: object,
) -> None:
    platform = RecordingPlatform()
    async with ThreadRenderers(budget=TIGHT) as renderers:
        renderers.attach(platform)
        budget = renderers.budget
        assert budget is not None
        renderer = renderers.renderer("t")
        for n in range(10):
            await budget.acquire(Priority.URGENT, f"other{n}", "reply")
            budget.release(f"other{n}", "reply")  # a call that took no time
        await renderer.apply(Typing(on=True))
        assert platform.count("typing") == 0
        assert renderer.statistics().typing_skipped == 1
        await trio.sleep(9)  # the next refresh finds a token
        assert platform.count("typing") == 1
        await renderer.apply(Typing(on=False))


async def test_a_429_holds_the_whole_connection_when_it_is_global(autojump_clock: object) -> None:
    platform = RecordingPlatform()
    platform.inject(lambda: PlatformError("429", retry_after=3.0, global_limit=True), kind="reply")
    async with ThreadRenderers(budget=TIGHT) as renderers:
        renderers.attach(platform)
        budget = renderers.budget
        assert budget is not None
        a, b = renderers.renderer("a"), renderers.renderer("b")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.apply, ReplyToCommand(key="r", action_id="x", text="hi"))
            await trio.sleep(0.1)
            nursery.start_soon(b.apply, PostOutput(key="f", kind="footer", text="done"))
        sends = platform.calls_of("send")
        assert sends[0].at >= 3.0  # the other thread waited the global limit out too
        assert budget.statistics().holds == 1

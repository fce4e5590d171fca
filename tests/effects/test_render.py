"""effects.render: the stream renderer over the recording platform, in trio's mock time.

The ``autojump_clock`` fixture (pytest-trio) makes every sleep instant while the platform
still records the trio time of each call, so pacing and Retry-After are asserted exactly.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from render_samples import balanced, long_answer, original_text

from threadspindle.effects.platform import PlatformError, PlatformLimits
from threadspindle.effects.render import (
    MAX_KEPT_OUTPUTS,
    RenderError,
    StreamRenderer,
    parse_component_action,
    render_tool_card,
)
from threadspindle.runtime.core.effect_types import (
    AppendOutput,
    Button,
    DismissPrompt,
    EditOutput,
    PostOutput,
    ReplyToCommand,
    SealOutput,
    ShowPermissionPrompt,
    ShowQuestion,
    Typing,
)
from threadspindle.testkit.recording_platform import RecordingPlatform

CHANNEL = "thread-1"


@pytest.fixture
def platform() -> RecordingPlatform:
    return RecordingPlatform()


@pytest.fixture
async def renderer(platform: RecordingPlatform) -> AsyncIterator[StreamRenderer]:
    async with StreamRenderer(platform, CHANNEL) as renderer:
        yield renderer


async def stream(
    renderer: StreamRenderer, key: str, text: str, *, step: int, every: float = 0.0
) -> None:
    """Stream ``text`` as one output in deltas of ``step`` characters, sealed at the end."""
    await renderer.apply(PostOutput(key=key, kind="text", text=text[:step]))
    for seq, start in enumerate(range(step, len(text), step), start=1):
        if every:
            await trio.sleep(every)
        await renderer.apply(AppendOutput(key=key, seq=seq, text=text[start : start + step]))
    await renderer.apply(SealOutput(key=key))


# -- pacing ----------------------------------------------------------------------------------


async def test_a_burst_of_20_deltas_a_second_makes_at_most_2_edits_a_second(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    words = [f"word{i} " for i in range(100)]  # 5 s at 20 deltas/s
    await stream(renderer, "t/r1/0", "".join(words), step=len(words[0]), every=0.05)
    await renderer.flush()

    edits = platform.calls_of("edit")
    per_second = collections.Counter(int(call.at) for call in edits)
    assert per_second and max(per_second.values()) <= 2
    gaps = [b.at - a.at for a, b in zip(edits, edits[1:], strict=False)]
    assert min(gaps) >= 0.5 - 1e-9
    assert len(edits) >= 8  # it did stream: about one edit per 500 ms
    assert platform.texts(CHANNEL) == ["".join(words)]


async def test_a_6000_char_answer_arrives_as_well_formed_messages(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    answer = long_answer(6000)
    # About 400 characters a second, as a fast model streams: 15 s of deltas.
    await stream(renderer, "t/r1/0", answer, step=20, every=0.05)
    await renderer.flush()
    texts = platform.texts(CHANNEL)
    assert 4 <= len(texts) <= 5
    assert all(len(t) <= 2000 and balanced(t) for t in texts)
    assert original_text(texts, answer) == answer
    assert "<https://example.com/docs/step3>" in texts[0]
    stats = renderer.statistics()
    assert stats.sends == len(texts) and stats.dirty_messages == 0
    calls = collections.Counter(c.kind for c in platform.calls)
    assert calls["edit"] <= 2 * 16  # paced: at most 2 a second over about 15 s
    print(
        f"6000-char answer streamed at 400 chars/s: {len(platform.calls)} platform calls",
        dict(calls),
    )


async def test_a_whole_answer_in_one_piece_is_sent_without_edits(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    answer = long_answer(6000)
    await renderer.apply(PostOutput(key="t/r1/0", kind="text", text=answer))
    await renderer.apply(SealOutput(key="t/r1/0"))
    await renderer.flush()
    assert platform.count("edit") == 0
    assert platform.count("send") == len(platform.texts(CHANNEL)) == 4
    assert original_text(platform.texts(CHANNEL), answer) == answer


# -- faults --------------------------------------------------------------------------------


async def test_429_retry_after_is_honoured_and_nothing_is_lost(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    platform.rate_limit(nth=2, kind="send", retry_after=3.0)
    platform.rate_limit(nth=2, kind="edit", retry_after=1.5, times=2)
    answer = long_answer(5000)
    await stream(renderer, "t/r1/0", answer, step=50, every=0.02)
    await renderer.flush()

    failed = [c for c in platform.calls if c.error is not None]
    assert [c.kind for c in failed] == ["send", "edit", "edit"]
    # The call after each 429 waited for Retry-After.
    for call in failed:
        following = platform.calls[platform.calls.index(call) + 1]
        assert following.kind == call.kind
        wait = 3.0 if call.kind == "send" else 1.5
        assert following.at - call.at >= wait - 1e-9
    assert renderer.statistics().rate_limited == 3
    assert original_text(platform.texts(CHANNEL), answer) == answer


async def test_5xx_is_retried_with_backoff(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    platform.server_error(kind="send", times=3)
    await renderer.apply(PostOutput(key="t/r1/0", kind="notice", text="⚠ hello"))
    times = [c.at for c in platform.calls if c.kind == "send"]
    assert len(times) == 4
    assert [round(b - a, 3) for a, b in zip(times, times[1:], strict=False)] == [0.5, 1.0, 2.0]
    assert platform.texts(CHANNEL) == ["⚠ hello"]
    assert renderer.statistics().retries == 3


async def test_a_send_whose_answer_was_lost_is_not_doubled(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    platform.server_error(kind="send", after_effect=True)
    posted = await renderer.apply(PostOutput(key="t/r1/0", kind="marker", text="» ann: hi"))
    assert platform.count("send", ok_only=False) == 2
    assert platform.texts(CHANNEL) == ["» ann: hi"]
    assert posted == [("t/r1/0", (platform.messages(CHANNEL)[0].id,))]


async def test_a_permanent_failure_raises_a_clear_error(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    platform.inject(lambda: PlatformError("403 Missing Permissions"), kind="send")
    with pytest.raises(RenderError) as caught:
        await renderer.apply(PostOutput(key="t/r1/0", kind="footer", text="3s"))
    assert caught.value.key == "t/r1/0" and caught.value.effect == "post_output"
    assert "403 Missing Permissions" in str(caught.value)
    # Retries are bounded too: a platform that keeps failing ends in the same error.
    platform.server_error(kind="send", times=100)
    with pytest.raises(RenderError):
        await renderer.apply(PostOutput(key="t/r1/1", kind="footer", text="4s"))
    assert platform.texts(CHANNEL) == []


# -- idempotency ------------------------------------------------------------------------------


async def test_a_key_is_never_posted_twice(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    post = PostOutput(key="t/r1/0", kind="text", text="hello")
    assert await renderer.apply(post) == []  # a stream's first message waits 500 ms
    assert await renderer.apply(post) == []
    first = await renderer.flush()
    assert first == [("t/r1/0", ("m1",))]
    reply = ReplyToCommand(key="t/reply/a1", action_id="a1", text="Queued (position 1)")
    assert await renderer.apply(reply) == [("t/reply/a1", ("m2",))]
    assert await renderer.apply(reply) == []
    # After a restart the reactor seeds the keys from the log.
    fresh = StreamRenderer(platform, CHANNEL)
    fresh.known("t/r1/0", first[0][1])
    assert await fresh.apply(post) == []
    assert fresh.message_ids("t/r1/0") == first[0][1]
    assert platform.count("send") == 1 and platform.count("reply") == 1
    assert renderer.statistics().duplicate_posts == 2


async def test_a_stream_cut_by_a_dead_renderer_is_resumed_whole_in_its_messages(
    platform: RecordingPlatform, autojump_clock: object
) -> None:
    """A gateway that died mid-stream left a message showing the start of an output; the
    renderer of the gateway taking over is given the whole text so far (from the log) and
    the message ids: it edits that message to the text, posts what no longer fits in it,
    drops the redelivered appends it already has by their seq, and goes on with new ones."""
    async with StreamRenderer(platform, CHANNEL) as dead:
        await dead.apply(PostOutput(key="k", kind="text", text="alpha "))
        first = await dead.flush()
    [(key, ids)] = first
    assert platform.texts(CHANNEL) == ["alpha "]
    long_tail = "word " * 500  # past one message's 2,000 characters
    async with StreamRenderer(platform, CHANNEL) as fresh:
        fresh.known(key, ids)
        posted = await fresh.resume_stream(key, "alpha beta " + long_tail, 1, ids)
        posted += await fresh.apply(AppendOutput(key="k", seq=1, text="beta "))  # again
        posted += await fresh.apply(AppendOutput(key="k", seq=2, text="gamma"))
        posted += await fresh.apply(SealOutput(key="k"))
        posted += await fresh.flush()
    texts = platform.texts(CHANNEL)
    assert texts[0].startswith("alpha beta word")  # the dead renderer's message, edited
    assert " ".join(texts).split() == ["alpha", "beta", *["word"] * 500, "gamma"]
    assert [k for k, _ in posted] == ["k"] * (len(texts) - 1)  # only the new ones reported
    assert fresh.statistics().ignored_appends == 1
    # A sealed output is resumed sealed: later appends are refused.
    async with StreamRenderer(platform, "other") as sealed:
        await sealed.resume_stream("s", "done", 3, (), sealed=True)
        await sealed.apply(AppendOutput(key="s", seq=4, text=" more"))
        await sealed.flush()
    assert platform.texts("other") == ["done"]


async def test_posts_made_in_the_background_are_reported(
    platform: RecordingPlatform, autojump_clock: object
) -> None:
    reported: list[tuple[str, tuple[str, ...]]] = []
    async with StreamRenderer(platform, CHANNEL, on_posted=lambda *p: reported.append(p)) as r:
        assert await r.apply(PostOutput(key="a", kind="tool", text="Read(x)")) == []
        await trio.sleep(1)
        assert reported == [("a", ("m1",))]
    async with StreamRenderer(platform, CHANNEL) as renderer:  # no callback: next apply
        await renderer.apply(PostOutput(key="b", kind="tool", text="Read(y)"))
        await trio.sleep(1)
        posted = await renderer.apply(PostOutput(key="c", kind="footer", text="1s"))
        assert posted == [("b", ("m2",)), ("c", ("m3",))]


async def test_appends_are_idempotent_by_seq(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    await renderer.apply(PostOutput(key="k", kind="text", text="a"))
    for seq, text in [(1, "b"), (2, "c"), (2, "c"), (1, "b"), (3, "d")]:
        await renderer.apply(AppendOutput(key="k", seq=seq, text=text))
    await renderer.apply(SealOutput(key="k"))
    await renderer.apply(AppendOutput(key="k", seq=4, text="late"))
    await renderer.apply(AppendOutput(key="unknown", seq=1, text="x"))
    await renderer.flush()
    assert platform.texts(CHANNEL) == ["abcd"]
    assert renderer.statistics().ignored_appends == 4


# -- typing ---------------------------------------------------------------------------------


async def test_typing_is_refreshed_while_on_and_after_posts_and_stops(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    await renderer.apply(Typing(on=True))
    await renderer.apply(Typing(on=True))  # already on: no extra call
    await trio.sleep(20)
    assert [c.at for c in platform.calls_of("typing")] == [0.0, 8.0, 16.0]
    await renderer.apply(PostOutput(key="t/r1/0", kind="tool", text="Read(a.py)"))
    await trio.sleep(2)
    assert platform.calls_of("send")[0].at == 20.5  # a card waits 500 ms for its result
    assert platform.calls_of("typing")[-1].at == 21.5  # re-shown 1 s after the post
    await renderer.apply(Typing(on=False))
    count = platform.count("typing")
    await trio.sleep(60)
    assert platform.count("typing") == count
    assert renderer.statistics().typing_calls == count


async def test_a_typing_failure_is_counted_not_raised(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    platform.inject(lambda: PlatformError("500", retryable=True), kind="typing")
    await renderer.apply(Typing(on=True))
    await trio.sleep(9)
    assert renderer.statistics().failures == 1
    assert platform.count("typing") == 1  # the refresh at 8 s worked


# -- cards, thinking, prompts -------------------------------------------------------------------


async def test_each_tool_call_is_its_own_compact_card(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    await renderer.apply(Typing(on=True))
    for n in range(15):
        key = f"t/r1/{n}"
        header = f"Bash(ls dir{n})"
        await renderer.apply(PostOutput(key=key, kind="tool", text=header))
        await trio.sleep(2.0 if n % 5 == 0 else 0.2)  # three slow tools
        mark = "✗ " if n == 7 else "→ "
        result = "\n".join(f"file{i}.py" for i in range(20 if n == 3 else 2))
        await renderer.apply(EditOutput(key=key, text=f"{header}\n{mark}{result}"))
        await trio.sleep(1.0)
    await renderer.apply(PostOutput(key="t/r1/15", kind="footer", text="17s · $0.0400 · m"))
    await renderer.apply(Typing(on=False))
    await renderer.flush()

    texts = platform.texts(CHANNEL)
    assert len(texts) == 16
    assert texts[0] == "-# 🔧 `Bash(ls dir0)`\n```\nfile0.py\nfile1.py\n```"
    assert "⚠️ **error**" in texts[7] and "⚠️" not in texts[6]
    assert "… (+12 lines)" in texts[3] and texts[3].count("\n") == 11
    assert texts[-1] == "17s · $0.0400 · m"
    calls = collections.Counter(c.kind for c in platform.calls)
    # A quick tool is one send with its result; a slow one shows its header, then an edit.
    assert calls["send"] == 16 and calls["edit"] == 3
    assert platform.messages(CHANNEL)[5].edits == 1
    print(f"run with 15 tool calls: {len(platform.calls)} platform calls {dict(calls)}")


def test_tool_card_rendering() -> None:
    assert render_tool_card("Read(a.py)") == "-# 🔧 `Read(a.py)`"
    card = render_tool_card("Bash(x)\n✗ exit 1: ```boom```")
    assert card.startswith("-# 🔧 `Bash(x)`\n⚠️ **error**\n```\n")
    assert balanced(card)


async def test_thinking_is_a_short_subtext_preview(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    thought = " ".join(f"idea{i}" for i in range(300)) + " see https://docs.rs/x"
    await stream(renderer, "t/r1/0", "", step=1)  # an empty text output posts nothing
    await renderer.apply(PostOutput(key="t/r1/1", kind="thinking", text=thought[:10]))
    for seq, start in enumerate(range(10, len(thought), 10), start=1):
        await renderer.apply(AppendOutput(key="t/r1/1", seq=seq, text=thought[start : start + 10]))
    await renderer.apply(SealOutput(key="t/r1/1"))
    await renderer.flush()
    (preview,) = platform.texts(CHANNEL)
    assert preview.startswith("-# 💭 …") and preview.endswith("idea299 see <https://docs.rs/x>")
    assert len(preview) <= 212 and "\n" not in preview


async def test_permission_prompt_buttons_and_dismissal(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    prompt = ShowPermissionPrompt(key="t/r1/2", request_id="req9", tool="Bash", detail="rm -rf b")
    [(key, (message_id,))] = await renderer.apply(prompt)
    message = platform.message(CHANNEL, message_id)
    assert [b.label for b in message.buttons] == ["Accept", "Deny"]
    assert [parse_component_action(b.action) for b in message.buttons] == [
        ("permission", "req9", True),
        ("permission", "req9", False),
    ]
    await renderer.apply(DismissPrompt(key=key, request_id="req9", outcome="Answered: allow"))
    await renderer.flush()
    assert message.buttons == ()
    assert message.text.endswith("\n-# Answered: allow") and "`Bash`" in message.text


async def test_question_select_menu(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    question = ShowQuestion(
        key="t/r1/3", request_id="q1", question="Which db?", options=("sqlite", "postgres")
    )
    [(_, (message_id,))] = await renderer.apply(question)
    menu = platform.message(CHANNEL, message_id).menu
    assert menu is not None and menu.options == ("sqlite", "postgres")
    assert parse_component_action(menu.custom_id) == ("question", "q1", None)
    assert platform.transcript(CHANNEL) == "❓ **Question:** Which db?\n{sqlite | postgres}"
    assert parse_component_action("remove_queued:7") is None


async def test_an_edit_that_shrinks_an_output_deletes_the_surplus_messages(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    await renderer.apply(PostOutput(key="k", kind="notice", text=long_answer(4000)))
    assert len(platform.texts(CHANNEL)) == 3
    await renderer.apply(EditOutput(key="k", text="(withdrawn)"))
    await renderer.flush()
    assert platform.texts(CHANNEL) == ["(withdrawn)"]
    assert renderer.statistics().deletes == 2


async def test_without_edits_only_final_messages_are_sent(autojump_clock: object) -> None:
    platform = RecordingPlatform(PlatformLimits(supports_edit=False, min_edit_interval_s=0))
    answer = long_answer(4500)
    async with StreamRenderer(platform, CHANNEL) as renderer:
        await stream(renderer, "k", answer, step=25)
        await renderer.apply(PostOutput(key="th", kind="thinking", text="hmm, let me see"))
        await renderer.apply(SealOutput(key="th"))
    assert platform.count("edit") == 0
    texts = platform.texts(CHANNEL)
    assert original_text(texts[:-1], answer) == answer
    assert texts[-1] == "-# 💭 hmm, let me see"


async def test_without_edits_a_stream_is_sent_at_paragraph_ends_paced(
    autojump_clock: object,
) -> None:
    """A platform without edits (WhatsApp) gets a long answer as it is written: a message
    at a paragraph end once the interval has passed, never inside a code block (whose blank
    lines are not paragraph ends), never under a heading, and all of it exactly once."""
    platform = RecordingPlatform(PlatformLimits(supports_edit=False, min_edit_interval_s=1.0))
    answer = "".join(
        f"## Part {n}\n\nProse of part {n}, one sentence.\n\n```py\na = {n}\n\nb = {n}\n```\n\n"
        for n in range(8)
    )
    async with StreamRenderer(platform, CHANNEL) as renderer:
        await stream(renderer, "k", answer, step=10, every=0.05)
        sent_before_seal = platform.count("send")
    texts = platform.texts(CHANNEL)
    sends = [c for c in platform.calls if c.kind == "send"]
    assert sent_before_seal >= 3  # not held back until the end
    assert platform.count("edit") == 0
    assert all(b.at - a.at >= 1.0 for a, b in zip(sends, sends[1:-1], strict=False))
    assert all(balanced(t) and t.count("```") % 2 == 0 for t in texts)  # no code block split
    assert not any(t.rstrip().endswith(tuple(f"## Part {n}" for n in range(8))) for t in texts)
    assert original_text(texts, answer) == answer


async def test_output_is_delivered_in_order_across_outputs(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    platform.rate_limit(kind="send", nth=2, retry_after=2.0)
    await renderer.apply(PostOutput(key="t/r1/0", kind="marker", text="» ann: go"))
    await stream(renderer, "t/r1/1", "first part", step=3, every=0.1)
    await renderer.apply(PostOutput(key="t/r1/2", kind="tool", text="Grep(x)"))
    await stream(renderer, "t/r1/3", "second part", step=3, every=0.1)
    await renderer.apply(PostOutput(key="t/r1/4", kind="footer", text="2s"))
    await renderer.flush()
    assert platform.texts(CHANNEL) == [
        "» ann: go",
        "first part",
        "-# 🔧 `Grep(x)`",
        "second part",
        "2s",
    ]


# -- the property: whatever the deltas, the messages say exactly the text -----------------------

_piece = st.one_of(
    st.text(alphabet="abc \n", min_size=1, max_size=30),
    st.sampled_from(["```py\n", "```\n", "https://x.io/a ", "`code` ", "\n\n"]),
    st.integers(100, 700).map(lambda n: "z" * n),
)


@settings(max_examples=100, deadline=None)
@given(
    pieces=st.lists(_piece, min_size=1, max_size=60),
    pauses=st.lists(st.booleans()),
    append_only=st.booleans(),
)
def test_final_messages_concatenate_to_the_streamed_text(
    pieces: list[str], pauses: list[bool], append_only: bool
) -> None:
    limits = PlatformLimits(char_limit=400, split_margin=50)
    platform = RecordingPlatform(limits, streams_append_only=append_only)
    text = "".join(pieces)

    async def main() -> None:
        async with StreamRenderer(platform, CHANNEL) as renderer:
            await renderer.apply(PostOutput(key="k", kind="text", text=pieces[0]))
            for seq, piece in enumerate(pieces[1:], start=1):
                if seq < len(pauses) and pauses[seq]:
                    await trio.sleep(0.3)
                await renderer.apply(AppendOutput(key="k", seq=seq, text=piece))
            await renderer.apply(SealOutput(key="k"))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    texts = platform.texts(CHANNEL)
    assert all(len(t) <= 350 and balanced(t) for t in texts)
    if append_only:  # every edit only added to what the message showed
        for message in platform.messages(CHANNEL):
            for shown, then in zip(message.history, message.history[1:], strict=False):
                assert then.startswith(shown)
    rebuilt = original_text(texts, text)
    # Only trailing whitespace may be missing: a blank last message is never sent.
    assert text.startswith(rebuilt) and not text[len(rebuilt) :].strip()


async def test_platform_traffic_grows_linearly_with_the_answer(autojump_clock: object) -> None:
    """A proxy for CPU that no machine load can flake: the characters the renderer hands
    to the platform (every send and edit) for a 10x longer answer are about 10x."""

    async def traffic(size: int) -> int:
        platform = RecordingPlatform()
        async with StreamRenderer(platform, CHANNEL) as renderer:
            await stream(renderer, "k", long_answer(size), step=100, every=0.02)
        return sum(len(call.text or "") for call in platform.calls)

    small, large = await traffic(50_000), await traffic(500_000)
    assert 9 * small <= large <= 11 * small


async def test_after_a_restart_seeded_outputs_are_edited_not_reposted(
    platform: RecordingPlatform, autojump_clock: object
) -> None:
    async with StreamRenderer(platform, CHANNEL) as before:
        posted = await before.apply(PostOutput(key="t/r1/0", kind="tool", text="Bash(make)"))
        prompt = ShowPermissionPrompt(key="t/r1/1", request_id="p", tool="Bash", detail="rm")
        posted += await before.apply(prompt)  # the card goes out first, reported here
        posted += await before.flush()
    assert [key for key, _ in posted] == ["t/r1/0", "t/r1/1"]
    async with StreamRenderer(platform, CHANNEL) as after:
        for key, ids in posted:
            after.known(key, ids)
        await after.apply(PostOutput(key="t/r1/0", kind="tool", text="Bash(make)"))
        await after.apply(EditOutput(key="t/r1/0", text="Bash(make)\n✗ exit 2"))
        await after.apply(DismissPrompt(key="t/r1/1", request_id="p", outcome="Expired"))
    assert platform.count("send") == 2
    card, prompt_message = platform.messages(CHANNEL)
    assert card.text == "-# 🔧 `Bash(make)`\n⚠️ **error**\n```\nexit 2\n```"
    assert prompt_message.buttons == () and prompt_message.text.endswith("-# Expired")


async def test_the_recording_platform_checks_and_records(autojump_clock: object) -> None:
    platform = RecordingPlatform(PlatformLimits(char_limit=50))
    platform.server_error(nth=2)  # the second call of any kind
    first = await platform.send("c", "hello", nonce="n1")
    try:
        await platform.typing("c")
        raise AssertionError("the injected 503 did not fire")
    except PlatformError as error:
        assert error.retryable and error.retry_after is None
    assert await platform.send("c", "hello again", nonce="n1") == first  # deduped by nonce
    for bad in ("", "x" * 51):
        try:
            await platform.send("c", bad)
            raise AssertionError("a bad message was accepted")
        except PlatformError as error:
            assert not error.retryable
    await platform.reply("c", "a1", "Queued", buttons=(Button(label="Remove", action="rm:1"),))
    assert platform.transcript("c") == "hello\n↳ Queued\n[Remove]"
    assert [c.kind for c in platform.calls] == ["send", "typing", "send", "send", "send", "reply"]
    assert platform.calls[1].error == "503 Service Unavailable"


async def test_a_long_lived_thread_forgets_old_finished_outputs(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    prompt = ShowPermissionPrompt(key="p", request_id="r", tool="Bash", detail="x")
    await renderer.apply(prompt)
    for n in range(MAX_KEPT_OUTPUTS + 10):
        await renderer.apply(PostOutput(key=f"k{n}", kind="marker", text=f"» u: {n}"))
    assert renderer.statistics().outputs <= MAX_KEPT_OUTPUTS
    assert renderer.message_ids("p")  # a prompt still waiting for its answer is kept
    assert not renderer.message_ids("k0") and renderer.message_ids(f"k{MAX_KEPT_OUTPUTS}")


async def test_a_platform_bug_in_the_background_is_reported_not_fatal(
    platform: RecordingPlatform, autojump_clock: object
) -> None:
    errors: list[RenderError] = []
    async with StreamRenderer(platform, CHANNEL, on_error=errors.append) as renderer:
        await renderer.apply(PostOutput(key="k", kind="text", text="hello"))
        await trio.sleep(0.6)  # sent by the background task at 0.5 s
        await renderer.apply(AppendOutput(key="k", seq=1, text=" world"))  # edit due at 1 s

        async def broken_edit(*args: object, **kwargs: object) -> None:
            raise KeyError("bug")

        platform.edit = broken_edit  # type: ignore[method-assign]
        await trio.sleep(1)  # the paced edit fails in the background; the task survives
        assert [str(e) for e in errors] == ["chat platform failed: KeyError: 'bug'"]
        assert renderer.last_error is errors[0]
        # Later effects are not blamed for it.
        posted = await renderer.apply(PostOutput(key="f", kind="footer", text="1s"))
        assert posted == [("f", ("m2",))]


async def test_what_follows_a_sealed_stream_comes_after_its_final_text(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    # Deltas faster than the pacing: when the stream is sealed its last edit is still due.
    await stream(renderer, "t/r1/0", "".join(f"slow{i} " for i in range(10)), step=6, every=0.1)
    await renderer.apply(PostOutput(key="t/r1/1", kind="footer", text="1.0s · $0.01 · m"))
    calls = [c for c in platform.calls if c.kind in ("send", "edit")]
    footer = next(i for i, c in enumerate(calls) if c.text and "$0.01" in c.text)
    text_calls = [i for i, c in enumerate(calls) if c.text and "slow" in c.text]
    assert max(text_calls) < footer  # the final edit of the answer went out first
    assert calls[max(text_calls)].text.rstrip().endswith("slow9")


async def test_a_dismissal_shows_before_anything_posted_after_it(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    # A new message dismisses a prompt sent a moment ago (its edit is not due yet), and the
    # next run answers at once: the buttons must be gone before that answer shows.
    prompt = ShowPermissionPrompt(key="t/r1/2", request_id="p1", tool="Bash", detail="rm x")
    [(key, (prompt_id,))] = await renderer.apply(prompt)
    await renderer.apply(DismissPrompt(key=key, request_id="p1", outcome="Dismissed"))
    await renderer.apply(PostOutput(key="t/r2/0", kind="text", text="Hello."))
    await renderer.apply(SealOutput(key="t/r2/0"))
    await renderer.apply(PostOutput(key="t/r2/1", kind="footer", text="1.0s · $0.01 · m"))
    calls = [c for c in platform.calls if c.kind in ("send", "edit")]
    dismissal = [i for i, c in enumerate(calls) if c.kind == "edit" and c.message_id == prompt_id]
    later_sends = [
        i for i, c in enumerate(calls) if c.kind == "send" and "Bash" not in (c.text or "")
    ]
    assert dismissal and len(later_sends) == 2 and dismissal[0] < min(later_sends), calls
    assert platform.message(CHANNEL, prompt_id).buttons == ()


async def test_a_platform_that_joins_messages_gets_a_busy_run_in_few_messages(
    autojump_clock: object,
) -> None:
    """WhatsApp (``joins_messages``): text and tool cards ready within one interval share a
    message; prompts and the footer stand alone and keep their place; nothing is lost."""
    limits = PlatformLimits(supports_edit=False, joins_messages=True, min_edit_interval_s=2.0)
    platform = RecordingPlatform(limits)
    async with StreamRenderer(platform, CHANNEL) as renderer:
        await stream(renderer, "t/r1/0", "Looking around.", step=5)
        for n in range(1, 6):
            await renderer.apply(PostOutput(key=f"t/r1/{n}a", kind="tool", text=f"Bash(ls {n})"))
            await trio.sleep(0.1)
            await renderer.apply(EditOutput(key=f"t/r1/{n}a", text=f"Bash(ls {n})\nok {n}"))
            await stream(renderer, f"t/r1/{n}b", f"Step {n} done.", step=4)
        await renderer.apply(
            ShowPermissionPrompt(key="t/r1/p", request_id="p1", tool="Bash", detail="rm x")
        )
        await renderer.apply(PostOutput(key="t/r1/f", kind="footer", text="2.0s · $0.01"))
    texts = platform.texts(CHANNEL)
    assert platform.count("edit") == 0
    assert texts[0] == "Looking around."  # the channel was idle: at once
    assert len(texts) == 4, texts  # the rest of the run in one, the prompt, the footer
    joined = texts[1]
    assert [joined.index(f"Step {n} done.") for n in range(1, 6)] == sorted(
        joined.index(f"Step {n} done.") for n in range(1, 6)
    )
    assert all(f"ok {n}" in joined for n in range(1, 6))
    assert "Permission needed" in texts[2] and texts[3] == "2.0s · $0.01"
    assert renderer.statistics().dirty_messages == 0

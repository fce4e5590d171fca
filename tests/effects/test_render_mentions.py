"""Only the core's own text may mention someone: a mention the agent wrote (``<@id>``) is
shown as text on every platform, never as a ping (Telegram's tg://user link, Slack's
``<@U…>``), while the core's "Allowed by <@id>" on a dismissed prompt still mentions."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from threadspindle.effects.chunking import split_message, thinking_preview
from threadspindle.effects.render import StreamRenderer
from threadspindle.effects.slack_markup import to_mrkdwn
from threadspindle.effects.telegram_markup import plain_text, to_telegram_html
from threadspindle.effects.web_markup import to_html
from threadspindle.effects.whatsapp_markup import to_whatsapp
from threadspindle.runtime.core.effect_types import (
    DismissPrompt,
    PostOutput,
    SealOutput,
    ShowPermissionPrompt,
    ShowQuestion,
)
from threadspindle.testkit.recording_platform import RecordingPlatform

CHANNEL = "thread-1"
AGENT = "Ping test: <@424242> <@U0VICTIM1> and `<@5>` in code"
NAMES = {"424242": "Victim", "77": "Alice"}


@pytest.fixture
def platform() -> RecordingPlatform:
    return RecordingPlatform()


@pytest.fixture
async def renderer(platform: RecordingPlatform) -> AsyncIterator[StreamRenderer]:
    async with StreamRenderer(platform, CHANNEL) as renderer:
        yield renderer


def assert_inert(text: str) -> None:
    """``text`` mentions nobody on Telegram or Slack, and shows the agent's mentions."""
    telegram = to_telegram_html(text, NAMES)
    assert "tg://user" not in telegram
    assert "<@424242>" in plain_text(text, NAMES)
    assert "<@U0VICTIM1>" not in to_mrkdwn(text)
    assert "&lt;@U0VICTIM1&gt;" in to_mrkdwn(text)
    assert "&lt;@424242&gt;" in to_html(text)
    assert "<@424242>" in to_whatsapp(text) and "\\<@" not in to_whatsapp(text)


async def test_streamed_agent_text_mentions_nobody(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    await renderer.apply(PostOutput(key="t/r1/0", kind="text", text=AGENT))
    await renderer.apply(SealOutput(key="t/r1/0"))
    await renderer.flush()
    [text] = platform.texts(CHANNEL)
    assert_inert(text)
    # Escaped in code too (where code ends is each converter's to say); the converters
    # show it as written there.
    assert "`\\<@5>`" in text and "<code>&lt;@5&gt;</code>" in to_telegram_html(text, NAMES)


def test_a_question_and_a_thinking_preview_mention_nobody() -> None:
    assert_inert(split_message(AGENT, 2000)[0])
    preview = thinking_preview(AGENT, truncated=False)
    assert "tg://user" not in to_telegram_html(preview, NAMES)


async def test_the_cores_answered_by_still_mentions_the_user(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    prompt = ShowPermissionPrompt(key="t/r1/2", request_id="p", tool="Bash", detail="ls <@424242>")
    [(key, (message_id,))] = await renderer.apply(prompt)
    await renderer.apply(DismissPrompt(key=key, request_id="p", outcome="Allowed by <@77>."))
    await renderer.flush()
    text = platform.message(CHANNEL, message_id).text
    telegram = to_telegram_html(text, NAMES)
    assert '<a href="tg://user?id=77">Alice</a>' in telegram
    assert "tg://user?id=424242" not in telegram


async def test_a_question_from_the_agent_mentions_nobody(
    renderer: StreamRenderer, platform: RecordingPlatform, autojump_clock: object
) -> None:
    question = ShowQuestion(key="t/r1/3", request_id="q", question=AGENT, options=("a", "b"))
    [(_, (message_id,))] = await renderer.apply(question)
    assert_inert(platform.message(CHANNEL, message_id).text)


@pytest.mark.parametrize(
    "line",
    [
        "**a`** <@424242> <@U0VICTIM1> `",
        "[a`b](https://example.com/) <@424242> <@U0VICTIM1> `",
        "<https://x/`> <@424242> <@U0VICTIM1> `",
        "||a`|| <@424242> <@U0VICTIM1> `",
        "~~a`~~ <@424242> <@U0VICTIM1> `",
    ],
)
def test_a_backtick_the_converter_reads_otherwise_hides_no_mention(line: str) -> None:
    # The escape used to skip what it took for inline code; the converters read links,
    # bold and spoilers first, and one of those can swallow a backtick: the "code" was
    # prose to them, its mention a real one.
    [text] = split_message(line, 2000)
    assert "tg://user" not in to_telegram_html(text, NAMES)
    assert "<@U0VICTIM1>" not in to_mrkdwn(text)


def test_a_mention_in_real_code_reads_as_written() -> None:
    [text] = split_message("use `a <@ b` here", 2000)
    assert "<code>a &lt;@ b</code>" in to_telegram_html(text, NAMES)
    assert "`a &lt;@ b`" in to_mrkdwn(text)
    assert "<code>a &lt;@ b</code>" in to_html(text)
    assert "`a <@ b`" in to_whatsapp(text)


def test_a_one_line_fence_the_converter_closes_at_once_hides_no_mention() -> None:
    # The chunker keeps ```x``` open as a fence (its lines were left unescaped); Slack's
    # converter closes it on the same line and read the next ones as prose: a real ping.
    [text] = split_message("```x```\n<@U0123ABCD> hi <@123456>\n```", 2000)
    assert "<@U0123ABCD>" not in to_mrkdwn(text)
    assert "tg://user" not in to_telegram_html(text, NAMES)
    [code] = split_message("```\nx <@ y\n```", 2000)
    assert "x &lt;@ y" in to_telegram_html(code, NAMES) and "x &lt;@ y" in to_mrkdwn(code)
    assert "x &lt;@ y" in to_html(code) and "x <@ y" in to_whatsapp(code)

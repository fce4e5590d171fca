"""``WhatsAppPlatform`` (httpx) against the fake Graph API: message shapes within WhatsApp's
limits, the numbered fallback, prompts closed by quoting, errors as ``PlatformError``, and
the Markdown conversion."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from threadspindle.effects.platform import PlatformError, SelectMenu
from threadspindle.effects.whatsapp_markup import to_whatsapp
from threadspindle.effects.whatsapp_platform import (
    WhatsAppPlatform,
    parse_thread_id,
    whatsapp_thread_id,
)
from threadspindle.runtime.core.effect_types import Button
from threadspindle.testkit.fake_whatsapp.server import FakeWhatsApp

USER = "15550001234"
THREAD = whatsapp_thread_id(USER)


@pytest.fixture
def fake() -> Iterator[FakeWhatsApp]:
    with FakeWhatsApp() as made:
        made.add_user(USER, "alice")
        yield made


@pytest.fixture
async def platform(fake: FakeWhatsApp) -> AsyncIterator[WhatsAppPlatform]:
    async with httpx.AsyncClient() as client:
        yield WhatsAppPlatform(
            client, token=fake.token, phone_number_id=fake.phone_id, base_url=fake.base_url
        )


def test_thread_ids_round_trip() -> None:
    assert parse_thread_id(whatsapp_thread_id("15551234567")) == ("15551234567", False)
    assert parse_thread_id(whatsapp_thread_id("120363", group=True)) == ("120363", True)
    with pytest.raises(ValueError):
        parse_thread_id("tg:123")


async def test_text_goes_out_converted_and_a_reply_quotes_its_command(
    fake: FakeWhatsApp, platform: WhatsAppPlatform
) -> None:
    sent = await platform.send(THREAD, "**Done** see [docs](https://x.io/a)")
    await platform.reply(THREAD, "wa-wamid.user7", "Queued (position 1)")
    first, second = fake.bot_messages(USER)
    assert first.id == sent and first.text == "*Done* see docs (https://x.io/a)"
    assert second.context == "wamid.user7"
    assert platform.limits.supports_edit is False


async def test_up_to_three_buttons_are_reply_buttons_with_short_titles(
    fake: FakeWhatsApp, platform: WhatsAppPlatform
) -> None:
    buttons = (
        Button(label="Accept", action="permission:allow:p1"),
        Button(label="Deny and tell the agent why", action="permission:deny:p1"),
    )
    await platform.send(THREAD, "🔐 Permission needed", buttons=buttons)
    (message,) = fake.bot_messages(USER)
    assert [b["title"] for b in message.buttons] == ["Accept", "Deny and tell the a…"]
    assert len(message.buttons[1]["title"]) == 20
    assert platform.choice_label("permission:deny:p1") == "Deny and tell the agent why"


async def test_more_choices_than_fit_become_a_numbered_text(
    fake: FakeWhatsApp, platform: WhatsAppPlatform
) -> None:
    buttons = tuple(Button(label=f"b{n}", action=f"x:{n}") for n in range(4))
    await platform.send(THREAD, "Pick", buttons=buttons)
    menu = SelectMenu(custom_id="question:q1", options=tuple(f"option {n}" for n in range(11)))
    await platform.send(THREAD, "Which?", menu=menu)
    pick, which = fake.bot_messages(USER)
    assert pick.type == which.type == "text" and not pick.choices()
    assert "4. b3" in pick.text and pick.text.endswith("Reply 1, 2, 3 or 4.")
    assert "11. option 10" in which.text
    assert platform.numbered_choice(THREAD, 11) == ("question:q1#10", "option 10")
    assert platform.numbered_choice(THREAD, 12) is None


async def test_a_question_of_ten_options_is_a_list(
    fake: FakeWhatsApp, platform: WhatsAppPlatform
) -> None:
    options = ("short", "a very long option that does not fit a row title", *"abcdefgh")
    menu = SelectMenu(custom_id="question:q2", options=options)
    await platform.send(THREAD, "Which?", menu=menu)
    (message,) = fake.bot_messages(USER)
    assert len(message.rows) == 10
    assert message.rows[1]["title"].endswith("…") and len(message.rows[1]["title"]) == 24
    assert platform.choice_label("question:q2#1") == options[1]


async def test_a_prompts_restatement_quotes_it(
    fake: FakeWhatsApp, platform: WhatsAppPlatform
) -> None:
    buttons = (Button(label="Accept", action="permission:allow:p1"),)
    prompt = await platform.send(THREAD, "🔐 **Permission needed:** `Bash`", buttons=buttons)
    await platform.send(THREAD, "unrelated")
    await platform.send(THREAD, "🔐 **Permission needed:** `Bash`\n-# allowed")
    unrelated, closing = fake.bot_messages(USER)[1:]
    assert unrelated.context is None and closing.context == prompt
    assert closing.text.endswith("_allowed_")


async def test_read_receipts_and_typing_are_for_a_received_message(
    fake: FakeWhatsApp, platform: WhatsAppPlatform
) -> None:
    await platform.typing(THREAD)  # nothing received yet: no call
    fake.say(USER, "hi")  # no webhook: only recorded in the chat
    (received,) = fake.messages(USER)
    platform.remember_inbound(THREAD, received.id)
    await platform.mark_read(received.id)
    await platform.typing(THREAD)
    assert fake.reads == [received.id] and fake.typing == [received.id]
    with pytest.raises(PlatformError):
        await platform.mark_read("wamid.unknown")


async def test_throttling_server_errors_and_refusals(
    fake: FakeWhatsApp, platform: WhatsAppPlatform
) -> None:
    fake.inject_fault(429, retry_after=0.7)
    with pytest.raises(PlatformError) as throttled:
        await platform.send(THREAD, "a")
    assert throttled.value.retry_after == 0.7
    fake.inject_fault(400, code=130429)  # throttled, no header: the default wait
    with pytest.raises(PlatformError) as plain:
        await platform.send(THREAD, "a")
    assert plain.value.retry_after == 1.0
    fake.inject_fault(400, code=131056)  # the pair rate: one message per 6 s to a user
    with pytest.raises(PlatformError) as paired:
        await platform.send(THREAD, "a")
    assert paired.value.retry_after == 6.0
    fake.inject_fault(503)
    with pytest.raises(PlatformError) as down:
        await platform.send(THREAD, "a")
    assert down.value.retryable and down.value.retry_after is None
    async with httpx.AsyncClient() as client:
        wrong = WhatsAppPlatform(
            client, token="nope", phone_number_id=fake.phone_id, base_url=fake.base_url
        )
        with pytest.raises(PlatformError) as refused:
            await wrong.send(THREAD, "a")
    assert not refused.value.retryable and "190" in str(refused.value)
    assert fake.bot_messages(USER) == []


def test_markup_leaves_code_alone() -> None:
    text = "## Plan\n**bold** ~~gone~~ `**kept**`\n```py\nx = 2 ** 3  # **no**\n```\n-# note"
    assert to_whatsapp(text) == (
        "*Plan*\n*bold* ~gone~ `**kept**`\n```py\nx = 2 ** 3  # **no**\n```\n_note_"
    )
    assert to_whatsapp("see <https://x.io/a>") == "see https://x.io/a"


async def test_media_is_downloaded_in_two_steps_within_its_limit(
    fake: FakeWhatsApp, platform: WhatsAppPlatform
) -> None:
    fake.voice(USER, b"OggS" + b"\0" * 60)  # queued for a webhook nobody listens on
    ((media_id, _),) = fake.media.items()
    audio, mime = await platform.download_media(media_id, max_bytes=1024)
    assert (audio, mime) == (b"OggS" + b"\0" * 60, "audio/ogg; codecs=opus")
    assert fake.media_lookups == [media_id] and fake.media_downloads == [media_id]
    with pytest.raises(PlatformError, match="over"):
        await platform.download_media(media_id, max_bytes=10)
    assert fake.media_downloads == [media_id]  # refused by its stated size, not fetched
    with pytest.raises(PlatformError) as missing:
        await platform.download_media("404404", max_bytes=1024)
    assert not missing.value.retryable


async def test_an_empty_option_gets_a_row_title_and_still_answers_empty(
    fake: FakeWhatsApp, platform: WhatsAppPlatform
) -> None:
    # WhatsApp refuses a row title outside 1-24 characters: the whole question was refused
    # and the run waited for an answer that could never come.
    menu = SelectMenu(custom_id="question:q3", options=("", "yes"))
    await platform.send(THREAD, "Which?", menu=menu)
    (message,) = fake.bot_messages(USER)
    assert [row["title"] for row in message.rows] == ["(empty)", "yes"]
    assert platform.choice_label("question:q3#0") == ""

"""Images and documents on WhatsApp, end to end: the medium is fetched from the fake Graph
API in its two steps, saved into the conversation's workdir (a small text file inlined)
and named to the agent, the caption the prompt; a file over the cap is refused with a
reply and nothing reaches the agent; a sticker is still answered with the hint to type."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from threadspindle.ingress.whatsapp.bot import NO_MEDIA
from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_whatsapp.stack import WhatsAppWorld, whatsapp_stack


async def test_an_image_with_a_caption_is_saved_and_named_to_the_agent(
    wa: WhatsAppWorld, tmp_path: Path
) -> None:
    async with whatsapp_stack(wa, tmp_path) as stack:
        prompts = stack.agents.prompts
        thread = await stack.start_chat()
        picture = os.urandom(4000)
        wa.fake.file(wa.chat(thread), picture, "image/jpeg", caption="what is this error?")
        await stack.until_footers(thread, 1)
        (prompt,) = prompts
        assert prompt.text == "what is this error?"
        (attachment,) = prompt.attachments
        assert attachment.name.startswith("image-") and attachment.name.endswith(".jpg")
        assert attachment.path is not None and Path(attachment.path).read_bytes() == picture
        assert Path(attachment.path).parent == Path(wa.workdir).resolve() / ".spindle" / (
            "attachments"
        )
        assert attachment.url is None


async def test_a_text_document_alone_is_inlined(wa: WhatsAppWorld, tmp_path: Path) -> None:
    async with whatsapp_stack(wa, tmp_path) as stack:
        prompts = stack.agents.prompts
        thread = await stack.start_chat()
        wa.fake.file(wa.chat(thread), b"a,b\n1,2\n", "text/csv", filename="data.csv")
        await stack.until_footers(thread, 1)
        (prompt,) = prompts
        assert prompt.text == ""
        (attachment,) = prompt.attachments
        assert attachment.name == "data.csv" and attachment.inline_text == "a,b\n1,2\n"


async def test_a_file_over_the_cap_is_refused_and_nothing_is_sent(
    wa: WhatsAppWorld, tmp_path: Path
) -> None:
    async with whatsapp_stack(wa, tmp_path, attachment_max_bytes=2048) as stack:
        thread = await stack.start_chat()
        wa.fake.file(wa.chat(thread), bytes(5000), "application/pdf", filename="big.pdf")
        refusal = await wait_for(
            lambda: [m.text for m in wa.bot_messages(thread) if "Not sent to the agent" in m.text]
        )
        assert "over the 2 KiB Spindle takes" in refusal[0]
        assert stack.agents.delivered == []


async def test_a_sticker_still_gets_the_hint_to_type(wa: WhatsAppWorld, tmp_path: Path) -> None:
    async with whatsapp_stack(wa, tmp_path) as stack:
        thread = await stack.start_chat()
        user = wa.chat(thread)
        wa.fake.deliver(wa.fake._inbound(user, user, "sticker", {"sticker": {"id": "1"}}))
        await wait_for(lambda: [m for m in wa.bot_messages(thread) if m.text == NO_MEDIA])
        assert stack.agents.delivered == []


@pytest.mark.parametrize("caption", ["/queue look", "!ls -la"])
async def test_a_file_whose_caption_is_a_command_is_refused_not_dropped(
    wa: WhatsAppWorld, tmp_path: Path, caption: str
) -> None:
    async with whatsapp_stack(wa, tmp_path) as stack:
        thread = await stack.start_chat()
        wa.fake.file(wa.chat(thread), b"x" * 10, "image/png", caption=caption)
        await wait_for(
            lambda: [
                m.text for m in wa.bot_messages(thread) if "a command takes no files" in m.text
            ]
        )
        assert stack.agents.delivered == [] and wa.fake.media_downloads == []

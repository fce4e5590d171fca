"""Photos and files sent on Telegram, end to end: getFile and the download from the fake
Telegram, saved into the conversation's workdir (a small text file inlined) and named to
the agent; the file URL, which holds the bot token, is kept nowhere; a file larger than a
bot may download is refused with a reply and nothing goes to the agent; an album's parts,
which come as separate updates, are one prompt."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_telegram.stack import TelegramWorld, telegram_stack


def _log_text(tmp_path: Path) -> bytes:
    return b"".join(
        p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("events.sqlite3")
    )


async def test_a_photo_with_a_caption_is_saved_and_named_to_the_agent(
    tg: TelegramWorld, tmp_path: Path
) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        prompts = stack.agents.prompts
        thread = await stack.start_topic()
        chat, topic = tg.where(thread)
        picture = os.urandom(3000)
        tg.fake.send_file(chat, tg.alice, picture, caption="what is wrong here?", topic=topic)
        await stack.until_footers(thread, 1)
        (prompt,) = prompts
        assert prompt.text == "what is wrong here?"
        (attachment,) = prompt.attachments
        assert attachment.content_type == "image/jpeg" and attachment.size == 3000
        assert attachment.url is None  # the download URL holds the bot token
        assert attachment.path is not None
        saved = Path(attachment.path)
        assert saved.parent == Path(tg.workdir).resolve() / ".spindle" / "attachments"
        assert saved.read_bytes() == picture  # the largest size, not the thumbnail
        assert tg.settings().token.encode() not in _log_text(tmp_path)


async def test_a_small_text_document_alone_is_inlined_into_the_prompt(
    tg: TelegramWorld, tmp_path: Path
) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        prompts = stack.agents.prompts
        thread = await stack.start_topic()
        chat, topic = tg.where(thread)
        tg.fake.send_file(
            chat,
            tg.alice,
            b"# Notes\nfix the parser\n",
            topic=topic,
            file_name="notes.md",
            mime_type="text/markdown",
        )
        await stack.until_footers(thread, 1)
        (prompt,) = prompts
        (attachment,) = prompt.attachments
        assert attachment.name == "notes.md"
        assert attachment.inline_text == "# Notes\nfix the parser\n"
        assert attachment.path is None and attachment.url is None


async def test_a_file_larger_than_a_bot_may_download_is_refused_and_nothing_is_sent(
    tg: TelegramWorld, tmp_path: Path
) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        thread = await stack.start_topic()
        chat, topic = tg.where(thread)
        tg.fake.send_file(
            chat,
            tg.alice,
            bytes(21 * 1024 * 1024),
            caption="look at this dump",
            topic=topic,
            file_name="core.dump",
        )
        refusal = await wait_for(
            lambda: [m.text for m in tg.bot_messages(thread) if "Not sent to the agent" in m.text]
        )
        assert "'core.dump' is 21.0 MiB: larger than the 20.0 MiB" in refusal[0]
        assert stack.agents.delivered == []
        assert tg.fake.world.downloads == []  # not even tried
        # The topic goes on.
        tg.say(thread, "then just say hello")
        await stack.until_footers(thread, 1)
        assert [text for _, text in stack.agents.delivered] == ["then just say hello"]


async def test_an_album_is_one_prompt_with_every_photo(tg: TelegramWorld, tmp_path: Path) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        prompts = stack.agents.prompts
        thread = await stack.start_topic()
        chat, topic = tg.where(thread)
        tg.say(thread, "SLOW work")
        await wait_for(lambda: stack.agents.delivered)
        # The parts come a moment apart: the second after the bot already read the first.
        tg.fake.send_file(
            chat, tg.alice, b"0" * 500, caption="compare these", topic=topic, media_group_id="g1"
        )
        await trio.sleep(0.4)
        for n in (1, 2):
            tg.fake.send_file(chat, tg.alice, b"%d" % n * 500, topic=topic, media_group_id="g1")
        await stack.until_footers(thread, 1)  # the interrupted run has none
        texts = [p.text for p in prompts]
        # One prompt: it interrupted the slow run once, with the three photos.
        assert texts == ["SLOW work", "compare these"]
        assert stack.agents.interrupts == [prompts[0].run_id]
        saved = [Path(a.path).read_bytes() for a in prompts[1].attachments if a.path]
        assert saved == [b"0" * 500, b"1" * 500, b"2" * 500]


async def test_updates_after_an_album_are_not_held_up_by_it(
    tg: TelegramWorld, tmp_path: Path
) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        prompts = stack.agents.prompts
        thread = await stack.start_topic()
        chat, topic = tg.where(thread)
        for n in range(2):
            tg.fake.send_file(
                chat,
                tg.alice,
                b"%d" % n * 10,
                caption="two shots" if n == 0 else "",
                topic=topic,
                media_group_id="g2",
            )
        tg.say(thread, "and this after. queue")
        await stack.until_footers(thread, 2)
        assert [(p.text, len(p.attachments)) for p in prompts] == [
            ("two shots", 2),
            ("and this after.", 0),
        ]


async def test_a_part_that_comes_after_its_album_was_sent_is_queued_behind_it(
    tg: TelegramWorld, tmp_path: Path
) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        prompts = stack.agents.prompts
        thread = await stack.start_topic()
        chat, topic = tg.where(thread)
        tg.fake.send_file(
            chat, tg.alice, b"a" * 10, caption="SLOW look", topic=topic, media_group_id="g3"
        )
        await wait_for(lambda: prompts)  # sent, after the album's wait
        tg.fake.send_file(chat, tg.alice, b"b" * 10, topic=topic, media_group_id="g3")
        await wait_for(lambda: stack.runtime.snapshot(thread).queue)  # it waits its turn
        await stack.until_footers(thread, 2)
        assert [(p.text, len(p.attachments)) for p in prompts] == [("SLOW look", 1), ("", 1)]
        assert stack.agents.interrupts == []  # the slow run went to its end


# A `!` caption: the file was saved, then dropped without a word for the shell command.
@pytest.mark.parametrize("caption", ["/queue look at this", "!ls -la"])
async def test_a_file_whose_caption_is_a_command_is_refused_not_dropped(
    tg: TelegramWorld, tmp_path: Path, caption: str
) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        thread = await stack.start_topic()
        chat, topic = tg.where(thread)
        tg.fake.send_file(chat, tg.alice, b"x" * 10, caption=caption, topic=topic)
        await wait_for(
            lambda: [
                m.text for m in tg.bot_messages(thread) if "a command takes no files" in m.text
            ]
        )
        assert stack.runtime.snapshot(thread).queue == ()
        assert stack.agents.delivered == [] and tg.fake.world.downloads == []

"""Files shared in a Slack thread, end to end through slack-bolt and the fake Slack: each is
downloaded with the bot token, saved into the conversation's workdir (a small text file
inlined) and named to the agent; a file Slack does not host is refused, its URL never sent
the token; a file over the limit refuses the message with a note only its author sees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_slack.stack import SlackWorld, slack_stack
from threadspindle.testkit.fake_slack.world import BOT_USER


async def test_a_shared_file_is_downloaded_with_the_token_and_named_to_the_agent(
    sl: SlackWorld, tmp_path: Path
) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        prompts = stack.agents.prompts
        thread = await stack.start_thread()
        channel, thread_ts = sl.where(thread)
        shot = os.urandom(5000)
        sl.fake.send_message(
            channel,
            sl.alice,
            "why does this render wrong?",
            thread_ts=thread_ts,
            files=(
                ("screen shot.png", shot, "image/png"),
                ("notes.txt", b"line one\n", "text/plain"),
            ),
        )
        await stack.until_footers(thread, 1)
        (prompt,) = prompts
        assert prompt.text == "why does this render wrong?"
        picture, notes = prompt.attachments
        assert picture.path is not None and Path(picture.path).read_bytes() == shot
        assert Path(picture.path).name.endswith("screen_shot.png")
        assert picture.url is None and picture.content_type == "image/png"
        assert notes.inline_text == "line one\n" and notes.path is None
        token = sl.settings().bot_token
        assert [auth for _, auth in sl.fake.world.downloads] == [f"Bearer {token}"] * 2


async def test_a_file_alone_is_a_prompt(sl: SlackWorld, tmp_path: Path) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        prompts = stack.agents.prompts
        thread = await stack.start_thread()
        channel, thread_ts = sl.where(thread)
        sl.fake.send_message(
            channel, sl.alice, "", thread_ts=thread_ts, files=(("a.log", b"boom\n", "text/plain"),)
        )
        await stack.until_footers(thread, 1)
        (prompt,) = prompts
        assert prompt.text == "" and prompt.attachments[0].inline_text == "boom\n"


async def test_a_file_slack_does_not_host_is_refused_and_never_gets_the_token(
    sl: SlackWorld, tmp_path: Path
) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        channel, thread_ts = sl.where(thread)
        sl.fake.send_message(
            channel,
            sl.alice,
            "read this",
            thread_ts=thread_ts,
            files=(("plan.gdoc", b"", "application/vnd.google-apps.document"),),
            external=True,
        )
        notes = await wait_for(
            lambda: [m.shown for m in sl.fake.ephemerals(sl.alice) if "Not sent" in m.shown]
        )
        assert "'plan.gdoc' is not one Slack hosts" in notes[0]
        assert stack.agents.delivered == []
        assert sl.fake.world.downloads == []
        sl.say(thread, "then just this")  # the thread goes on
        await stack.until_footers(thread, 1)
        assert [text for _, text in stack.agents.delivered] == ["then just this"]


async def test_a_file_over_the_limit_refuses_the_message(sl: SlackWorld, tmp_path: Path) -> None:
    async with slack_stack(sl, tmp_path, attachment_max_bytes=1000) as stack:
        thread = await stack.start_thread()
        channel, thread_ts = sl.where(thread)
        sl.fake.send_message(
            channel,
            sl.alice,
            "look",
            thread_ts=thread_ts,
            files=(("big.bin", bytes(5000), "application/octet-stream"),),
        )
        notes = await wait_for(
            lambda: [m.shown for m in sl.fake.ephemerals(sl.alice) if "Not sent" in m.shown]
        )
        assert "'big.bin' is 4.9 KiB: larger than the 1.0 KiB Spindle takes" in notes[0]
        assert stack.agents.delivered == []
        attachments = Path(sl.workdir) / ".spindle" / "attachments"
        assert not attachments.exists() or list(attachments.iterdir()) == []


async def test_an_app_without_files_read_is_told_and_no_sign_in_page_is_saved(
    sl: SlackWorld, tmp_path: Path
) -> None:
    # Slack answers such a download with its sign-in page and a 200.
    with sl.fake.world.lock:
        sl.fake.world.files_read = False
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        channel, thread_ts = sl.where(thread)
        sl.fake.send_message(
            channel, sl.alice, "see", thread_ts=thread_ts, files=(("a.png", b"png", "image/png"),)
        )
        notes = await wait_for(
            lambda: [m.shown for m in sl.fake.ephemerals(sl.alice) if "Not sent" in m.shown]
        )
        assert "Slack answered with a web page instead of the file 'a.png'" in notes[0]
        assert "files:read" in notes[0]
        assert stack.agents.delivered == []
        attachments = Path(sl.workdir) / ".spindle" / "attachments"
        assert not attachments.exists() or list(attachments.iterdir()) == []


@pytest.mark.parametrize("words", ["queue look at this", "!ls -la"])
async def test_a_command_with_files_is_refused_not_dropped(
    sl: SlackWorld, tmp_path: Path, words: str
) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        channel, thread_ts = sl.where(thread)
        sl.fake.send_message(
            channel,
            sl.alice,
            f"<@{BOT_USER}> {words}",
            thread_ts=thread_ts,
            files=(("a.png", b"png", "image/png"),),
        )
        notes = await wait_for(
            lambda: [m.shown for m in sl.fake.ephemerals(sl.alice) if "takes no files" in m.shown]
        )
        assert notes and stack.runtime.snapshot(thread).queue == ()
        assert sl.fake.world.downloads == []

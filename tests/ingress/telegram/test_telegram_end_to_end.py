"""The whole Telegram bot through the real python-telegram-bot against the fake Telegram:
runtime on a real SQLite log, stream renderer over TelegramPlatform, scripted fake agent
(``testkit.fake_discord.stack.SCRIPT`` says what each prompt word makes it do). What is
Telegram's own is here; what every platform must do is tests/test_platform_contract.py."""

from __future__ import annotations

from pathlib import Path

import trio

from threadspindle.effects.telegram_platform import telegram_thread_id
from threadspindle.ingress.telegram.bot import NO_LONGER_PENDING, REFUSAL
from threadspindle.runtime.core.agent_events import TextDelta
from threadspindle.testkit.fake_agent import Step
from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_discord.stack import SCRIPT, long_answer
from threadspindle.testkit.fake_telegram.html import parse_html, utf16_len
from threadspindle.testkit.fake_telegram.stack import (
    TelegramStack,
    TelegramWorld,
    is_footer,
    telegram_stack,
)


def _delivered(stack: TelegramStack) -> list[str]:
    return [text for _, text in stack.agents.delivered]


async def test_commands_are_registered_in_telegram_spelling(
    tg: TelegramWorld, tmp_path: Path
) -> None:
    async with telegram_stack(tg, tmp_path):
        names = [c["command"] for c in tg.fake.commands()]
        for name in ("claude", "echo", "queue", "abort", "status", "clear_queue", "model"):
            assert name in names
        assert all(n.replace("_", "").isalnum() and n.islower() for n in names)


async def test_a_private_chat_is_one_thread(tg: TelegramWorld, tmp_path: Path) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        thread = telegram_thread_id(tg.alice)
        tg.say(thread, "hi before any conversation")
        (hint,) = await wait_for(lambda: tg.bot_messages(thread))
        assert "/claude start" in hint.text
        tg.say(thread, f"/claude start {tg.workdir}")
        await wait_for(
            lambda: stack.runtime.snapshot(thread),
            lambda s: s is not None and s.conversation is not None,
        )
        tg.say(thread, "hi")
        messages = await stack.until_footers(thread, 1)
        assert "Hello from fake agent." in [m.text for m in messages]
        assert _delivered(stack) == ["hi"]


async def test_a_message_in_a_project_groups_general_topic_opens_a_topic(
    tg: TelegramWorld, tmp_path: Path
) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        tg.fake.send_message(tg.project, tg.alice, "fix the login page\nit crashes")
        (topic,) = await wait_for(lambda: list(tg.fake.topics(tg.project)))
        assert tg.fake.topics(tg.project)[topic] == "fix the login page"
        thread = telegram_thread_id(tg.project, topic)
        await stack.until_footers(thread, 1)
        state = stack.runtime.snapshot(thread)
        assert state is not None and state.conversation is not None
        assert state.conversation.agent == "codex"
        assert _delivered(stack) == ["fix the login page\nit crashes"]


async def test_an_update_handled_but_not_confirmed_is_dropped_by_the_next_process(
    tg: TelegramWorld, tmp_path: Path
) -> None:
    """A process that dies after handling an update but before the next getUpdates
    confirmed it is handed that update again by Telegram: it must open no second topic and
    send no second prompt."""
    async with telegram_stack(tg, tmp_path) as stack:
        tg.fake.send_message(tg.project, tg.alice, "one topic only")
        (topic,) = await wait_for(lambda: list(tg.fake.topics(tg.project)))
        thread = telegram_thread_id(tg.project, topic)
        await stack.until_footers(thread, 1)
    (update,) = tg.fake.issued_updates()
    assert tg.fake.unconfirmed() == []  # a clean stop confirmed it
    tg.fake.redeliver(update)  # as if the confirmation had never gone out
    async with telegram_stack(tg, tmp_path) as stack:
        ingress = stack.app.telegram.ingress  # type: ignore[union-attr]
        await wait_for(lambda: ingress.handled, lambda n: n >= 1)
        await wait_for(lambda: tg.fake.unconfirmed(), lambda ids: ids == [])
        assert list(tg.fake.topics(tg.project)) == [topic]
        assert stack.agents.delivered == []
        assert sum(map(is_footer, tg.messages(thread))) == 1


async def test_queued_messages_follow_their_edits(tg: TelegramWorld, tmp_path: Path) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        thread = await stack.start_topic()
        tg.say(thread, "SLOW work")
        await wait_for(lambda: _delivered(stack))
        edited = tg.say(thread, "add tests. queue")
        withdrawn = tg.say(thread, "add a changelog. queue")
        tg.say(thread, "bump the version. queue")
        await wait_for(
            lambda: stack.runtime.snapshot(thread), lambda s: s is not None and len(s.queue) == 3
        )
        chat, _ = tg.where(thread)
        tg.fake.edit_message(chat, edited, "add more tests. queue")
        tg.fake.edit_message(chat, withdrawn, "add a changelog.")
        await stack.until_footers(thread, 3, timeout=20)
        assert _delivered(stack) == ["SLOW work", "add more tests.", "bump the version."]


async def test_remove_from_queue_takes_the_prompt_out(tg: TelegramWorld, tmp_path: Path) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        thread = await stack.start_topic()
        tg.say(thread, "SLOW work")
        await wait_for(lambda: _delivered(stack))
        tg.say(thread, "not this one. queue")
        tg.say(thread, "but this one. queue")
        queued = await wait_for(
            lambda: [m for m in tg.bot_messages(thread) if m.buttons()],
            lambda ms: len(ms) == 2,
        )
        button = queued[0].buttons()[0]
        assert button["text"] == "Remove from queue"
        chat, _ = tg.where(thread)
        click = tg.fake.click(chat, queued[0].message_id, button["callback_data"], tg.alice)
        await wait_for(lambda: tg.fake.callback_answer(click))
        await wait_for(
            lambda: stack.runtime.snapshot(thread), lambda s: s is not None and len(s.queue) == 1
        )
        await stack.until_footers(thread, 2, timeout=20)
        assert _delivered(stack) == ["SLOW work", "but this one."]
        # A second click on the same button: the prompt is no longer queued, nothing changes.
        again = tg.fake.click(chat, queued[0].message_id, button["callback_data"], tg.alice)
        answer = await wait_for(lambda: tg.fake.callback_answer(again))
        assert answer["text"] == "That prompt is no longer queued."


async def test_a_click_on_a_dismissed_prompt_is_no_longer_pending(
    tg: TelegramWorld, tmp_path: Path
) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        thread = await stack.start_topic()
        tg.say(thread, "PERMISSION needed")
        (prompt,) = await wait_for(lambda: [m for m in tg.messages(thread) if m.buttons()])
        assert [b["text"] for b in prompt.buttons()] == ["Accept", "Deny"]
        tg.say(thread, "never mind")
        await stack.until_footers(thread, 1)
        chat, _ = tg.where(thread)
        assert tg.fake.message(chat, prompt.message_id).buttons() == []
        click = tg.fake.click(
            chat, prompt.message_id, prompt.buttons()[0]["callback_data"], tg.alice
        )
        answer = await wait_for(lambda: tg.fake.callback_answer(click))
        assert answer["text"] == NO_LONGER_PENDING
        await trio.sleep(0.3)
        # The dismissal denied the request (the agent is never left waiting); the stale
        # click added no second answer.
        assert stack.agents.answers == [("perm1", False)]
        assert _delivered(stack) == ["PERMISSION needed", "never mind"]


async def test_a_6000_character_answer_is_well_formed_html_within_the_limit(
    tg: TelegramWorld, tmp_path: Path
) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        thread = await stack.start_topic()
        tg.say(thread, "LONG answer")
        messages = await stack.until_footers(thread, 1)
        answer = [m for m in messages if m.from_id != tg.alice and not is_footer(m)]
        assert len(answer) >= 2
        for message in answer:
            assert message.parse_mode == "HTML"
            text, entities = parse_html(message.source)  # Telegram would take it
            assert utf16_len(text) <= 4096
            assert "```" not in text  # fences became <pre> blocks
        shown = "\n".join(m.text for m in answer)
        for line in long_answer().splitlines():
            if not line.startswith("```"):
                assert line.strip().lstrip("# ") in shown
        blocks = [e for m in answer for e in m.entities if e["type"] == "pre"]
        assert len(blocks) >= 3 and all(e.get("language") == "python" for e in blocks)


async def test_markup_telegram_refuses_goes_out_as_plain_text(
    tg: TelegramWorld, tmp_path: Path
) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        thread = await stack.start_topic()
        # The fault is for the answer: the start reply (sent after the start is logged)
        # must be out first, or it takes the fault instead.
        await wait_for(lambda: any(m.text.startswith("Started") for m in tg.messages(thread)))
        tg.fake.inject_fault(
            400,
            method="sendMessage",
            times=1,
            description="Bad Request: can't parse entities: unsupported start tag",
        )
        tg.say(thread, "hi")
        messages = await stack.until_footers(thread, 1)
        assert "Hello from fake agent." in [m.text for m in messages]
        assert stack.app.telegram is not None
        assert stack.app.telegram.platform.markup_fallbacks == 1
        assert [m.parse_mode for m in messages if m.text == "Hello from fake agent."] == [None]


async def test_typing_is_shown_while_a_run_is_active(tg: TelegramWorld, tmp_path: Path) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        thread = await stack.start_topic()
        tg.say(thread, "SLOW work")
        messages = await stack.until_footers(thread, 1)
        chat, topic = tg.where(thread)
        typing = tg.fake.chat_actions(chat, topic)
        assert typing, "sendChatAction was called during the run"
        await trio.sleep(1.2)
        footer_at = max(
            c.at for c in tg.fake.calls("sendMessage") if "$0.0010" in str(c.params.get("text"))
        )
        assert max(tg.fake.chat_actions(chat, topic)) <= footer_at
        assert is_footer(messages[-1])


async def test_edits_in_one_chat_are_paced(tg: TelegramWorld, tmp_path: Path) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        thread = await stack.start_topic()
        tg.say(thread, "BURST")
        await stack.until_footers(thread, 1)
        chat, _ = tg.where(thread)
        edits = [c.at for c in tg.fake.calls("editMessageText") if c.params.get("chat_id") == chat]
        assert len(edits) >= 3  # it did stream
        gaps = [b - a for a, b in zip(edits, edits[1:], strict=False)]
        assert min(gaps) >= 0.25, gaps  # min_edit_interval_s is 0.3 here


async def test_a_refused_user_is_told_privately_and_nothing_runs(
    tg: TelegramWorld, tmp_path: Path
) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        thread = await stack.start_topic()
        tg.say(thread, "rm -rf / please", user=tg.mallory)
        tg.say(thread, "and again", user=tg.mallory)
        told = telegram_thread_id(tg.mallory)
        (refusal,) = await wait_for(lambda: tg.bot_messages(told))
        assert refusal.text == REFUSAL
        tg.say(thread, "PERMISSION please")
        (prompt,) = await wait_for(lambda: [m for m in tg.messages(thread) if m.buttons()])
        chat, _ = tg.where(thread)
        click = tg.fake.click(
            chat, prompt.message_id, prompt.buttons()[0]["callback_data"], tg.mallory
        )
        answer = await wait_for(lambda: tg.fake.callback_answer(click))
        assert answer == {"text": REFUSAL, "show_alert": True}
        await trio.sleep(0.3)
        assert _delivered(stack) == ["PERMISSION please"]
        assert stack.agents.answers == []
        # Nothing about mallory in the group itself.
        assert all(REFUSAL not in m.text for m in tg.messages(thread))
        assert len(tg.bot_messages(told)) == 1  # told once, not per message


async def test_an_emoji_heavy_answer_is_split_by_utf16_units_and_nothing_is_cut(
    tg: TelegramWorld, tmp_path: Path
) -> None:
    # Telegram counts its limit in UTF-16 units, where each 🟢 is two: split by characters,
    # a 4000-character message is over 4096 and was cut, losing the lines after the cut.
    lines = [f"- 🟢 tests/test_module_{i:03d}.py passed" for i in range(200)]
    answer = "\n".join(lines) + "\n"

    def script(prompt: str) -> list[Step]:
        if "EMOJI" in prompt:
            return [Step("event", TextDelta(text=answer))]
        return SCRIPT(prompt)

    async with telegram_stack(tg, tmp_path) as stack:
        stack.agents.script = script
        thread = await stack.start_topic()
        tg.say(thread, "EMOJI report")
        messages = await stack.until_footers(thread, 1)
        body = [m for m in messages if m.from_id != tg.alice and "🟢" in m.text]
        assert len(body) >= 2
        assert all(utf16_len(m.text) <= 4096 for m in body)
        shown = "\n".join(m.text for m in body)
        assert [line for line in lines if line not in shown] == []
        assert stack.app.telegram is not None
        assert stack.app.telegram.platform.truncated == 0

"""Voice messages on Telegram, end to end: a voice note (getFile + the file download from the
fake Telegram) is shown "🎤 Transcribing…", transcribed by the fake endpoint, the status
edited into the transcript, and the transcript is the prompt; during a pending question it
dismisses the question as text would."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from threadspindle.ingress.transcribe import TranscriptionConfig
from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_telegram.stack import TelegramWorld, telegram_stack
from threadspindle.testkit.fake_transcription import FakeTranscription


def _config(fake: FakeTranscription) -> TranscriptionConfig:
    return TranscriptionConfig(base_url=fake.base_url, api_key=SecretStr("test-key"))


async def test_a_voice_note_becomes_its_transcript(tg: TelegramWorld, tmp_path: Path) -> None:
    with FakeTranscription() as speech:
        async with telegram_stack(tg, tmp_path, transcription=_config(speech)) as stack:
            thread = await stack.start_topic()
            tg.say(thread, "QUESTION first")
            await wait_for(lambda: stack.runtime.snapshot(thread).blockers)
            tg.voice(thread, b"SPEECH:add a test for the parser")
            await stack.until_footers(thread, 1)
            delivered = [text for _, text in stack.agents.delivered]
            assert delivered == ["QUESTION first", "add a test for the parser"]
            assert ("q1", None) in stack.agents.answers
            await wait_for(
                lambda: [m.text for m in tg.bot_messages(thread)],
                lambda t: "🎤 add a test for the parser" in t,
            )
            assert "🎤 Transcribing…" not in [m.text for m in tg.bot_messages(thread)]
            (request,) = speech.requests
            assert request.audio == b"SPEECH:add a test for the parser"
            assert request.content_type == "audio/ogg"


async def test_without_transcription_a_voice_note_is_answered_not_sent(
    tg: TelegramWorld, tmp_path: Path
) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        thread = await stack.start_topic()
        tg.voice(thread, b"SPEECH:hello")
        await wait_for(
            lambda: [m.text for m in tg.bot_messages(thread) if "need a transcription" in m.text]
        )
        assert stack.agents.delivered == []


async def test_a_voice_note_in_a_project_group_opens_a_topic_with_the_transcript(
    tg: TelegramWorld, tmp_path: Path
) -> None:
    from threadspindle.effects.telegram_platform import telegram_thread_id

    with FakeTranscription() as speech:
        async with telegram_stack(tg, tmp_path, transcription=_config(speech)) as stack:
            before = set(tg.fake.topics(tg.project))
            tg.voice(telegram_thread_id(tg.project), b"SPEECH:tidy the README")
            topics = await wait_for(lambda: set(tg.fake.topics(tg.project)) - before)
            topic = topics.pop()
            assert tg.fake.topics(tg.project)[topic] == "tidy the README"
            await wait_for(lambda: [t for _, t in stack.agents.delivered] == ["tidy the README"])

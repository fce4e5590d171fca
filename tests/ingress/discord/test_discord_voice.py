"""Voice messages on Discord, end to end: the fake Discord sends a voice note (IS_VOICE_MESSAGE
and an Ogg attachment), the bot shows "🎤 Transcribing…", the fake transcription endpoint
hears it, the message becomes the transcript, and the transcript (never the file) is the
prompt. A voice message during a pending question dismisses it as text would."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from threadspindle.ingress.transcribe import TranscriptionConfig
from threadspindle.testkit.fake_discord.harness import World, wait_for
from threadspindle.testkit.fake_discord.stack import discord_stack
from threadspindle.testkit.fake_transcription import FakeTranscription


def _config(fake: FakeTranscription) -> TranscriptionConfig:
    return TranscriptionConfig(
        base_url=fake.base_url, model="whisper-large-v3", api_key=SecretStr("test-key")
    )


def _bot_texts(world: World, thread: int) -> list[str]:
    return [m.content for m in world.fake.messages(thread) if m.author_id != world.alice]


async def test_a_voice_message_is_transcribed_and_the_transcript_is_the_prompt(
    world: World, tmp_path: Path
) -> None:
    with FakeTranscription() as speech:
        async with discord_stack(world, tmp_path, transcription=_config(speech)) as stack:
            thread = await stack.start_thread()
            world.fake.send_voice_message(thread, world.alice, b"SPEECH:fix the flaky test")
            await stack.until_footers(thread, 1)
            assert [text for _, text in stack.agents.delivered] == ["fix the flaky test"]
            texts = _bot_texts(world, thread)
            assert "🎤 fix the flaky test" in texts
            assert "🎤 Transcribing…" not in texts  # edited into the transcript
            (request,) = speech.requests
            assert request.model == "whisper-large-v3" and request.content_type == "audio/ogg"
            assert request.filename == "voice-message.ogg"
            assert "voice-message.ogg" not in stack.agents.delivered[0][1]


async def test_a_voice_message_dismisses_a_pending_question(world: World, tmp_path: Path) -> None:
    with FakeTranscription() as speech:
        async with discord_stack(world, tmp_path, transcription=_config(speech)) as stack:
            thread = await stack.start_thread()
            world.fake.send_message(thread, world.alice, "QUESTION first")
            await wait_for(lambda: stack.runtime.snapshot(str(thread)).blockers)
            world.fake.send_voice_message(thread, world.alice, b"SPEECH:never mind, do this")
            await stack.until_footers(thread, 1)
            assert [t for _, t in stack.agents.delivered] == [
                "QUESTION first",
                "never mind, do this",
            ]
            assert ("q1", None) in stack.agents.answers  # dismissed to the agent
            assert stack.runtime.snapshot(str(thread)).blockers == ()


async def test_without_transcription_or_when_it_fails_nothing_reaches_the_agent(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_voice_message(thread, world.alice, b"SPEECH:hello")
        await wait_for(
            lambda: [t for t in _bot_texts(world, thread) if "need a transcription" in t]
        )
        assert stack.agents.delivered == []
    with FakeTranscription() as speech:
        speech.fail_with = (503, "whisper is overloaded")
        async with discord_stack(world, tmp_path, transcription=_config(speech)) as stack:
            world.fake.send_voice_message(thread, world.alice, b"SPEECH:hello")
            failed = await wait_for(
                lambda: [t for t in _bot_texts(world, thread) if "Could not transcribe" in t]
            )
            assert "503: whisper is overloaded" in failed[0]
            assert stack.agents.delivered == []


async def test_a_voice_message_in_a_project_channel_opens_its_thread_with_the_transcript(
    world: World, tmp_path: Path
) -> None:
    with FakeTranscription() as speech:
        async with discord_stack(world, tmp_path, transcription=_config(speech)) as stack:
            before = set(world.fake.threads(world.project_channel))
            world.fake.send_voice_message(
                world.project_channel, world.alice, b"SPEECH:rename the config loader"
            )
            opened = await wait_for(lambda: set(world.fake.threads(world.project_channel)) - before)
            thread = opened.pop()
            await stack.until_footers(thread, 1)
            assert [t for _, t in stack.agents.delivered] == ["rename the config loader"]
            assert world.fake.world.channels[thread].name == "rename the config loader"
            assert not (Path(world.workdir) / ".spindle").exists()  # the audio is not saved

"""Voice messages on WhatsApp, end to end: an audio message's media is fetched from the fake
Graph API in its two steps (``GET /{media-id}``, then its URL), transcribed by the fake
endpoint, the chat shows "🎤 Transcribing…" then "🎤 <transcript>" (new messages: no edits),
and the transcript is the prompt, durable before the webhook is answered; during a pending
question it dismisses the question as text would. Without transcription (or when it fails)
the user is told why and nothing reaches the agent; a redelivered audio runs nothing twice."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from pydantic import SecretStr

from threadspindle.ingress.transcribe import TRANSCRIBING, TranscriptionConfig
from threadspindle.ingress.whatsapp.bot import NO_TRANSCRIPTION
from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_transcription import FakeTranscription
from threadspindle.testkit.fake_whatsapp.server import Delivery
from threadspindle.testkit.fake_whatsapp.stack import (
    WhatsAppStack,
    WhatsAppWorld,
    whatsapp_stack,
)


def _config(fake: FakeTranscription) -> TranscriptionConfig:
    return TranscriptionConfig(base_url=fake.base_url, api_key=SecretStr("test-key"))


def _delivered(stack: WhatsAppStack) -> list[str]:
    return [text for _, text in stack.agents.delivered]


def _audio(delivery: Delivery) -> dict[str, str]:
    """The delivered message's id and its ``audio`` object."""
    (message,) = json.loads(delivery.body)["entry"][0]["changes"][0]["value"]["messages"]
    return {"wamid": message["id"], **message["audio"]}


def _logged(tmp_path: Path, action_id: str) -> list[str]:
    """The durable actions with this id (their JSON), straight from the SQLite log."""
    with sqlite3.connect(tmp_path / "events.sqlite3") as db:
        rows = db.execute(
            "SELECT action FROM actions WHERE json_extract(action, '$.action_id') = ?",
            (action_id,),
        )
        return [row[0] for row in rows]


async def test_a_voice_message_becomes_its_transcript(wa: WhatsAppWorld, tmp_path: Path) -> None:
    spoken = b"SPEECH:add a test for the parser"
    with FakeTranscription() as speech:
        async with whatsapp_stack(wa, tmp_path, transcription=_config(speech)) as stack:
            thread = await stack.start_chat()
            user = wa.chat(thread)
            wa.fake.say(user, "QUESTION first")
            await wait_for(lambda: stack.runtime.snapshot(thread).blockers)
            delivery = wa.fake.voice(user, spoken)
            audio = _audio(delivery)
            await wait_for(delivery.done.is_set)
            # Answered 200 only once the transcript's prompt was durable.
            (action,) = _logged(tmp_path, f"wa-{audio['wamid']}")
            assert json.loads(action)["text"] == "add a test for the parser"
            assert delivery.statuses == [200]
            await stack.until_footers(thread, 1)
            assert _delivered(stack) == ["QUESTION first", "add a test for the parser"]
            assert ("q1", None) in stack.agents.answers  # the question was dismissed
            texts = [m.text for m in wa.bot_messages(thread)]
            shown = texts.index("🎤 add a test for the parser")
            assert texts.index(TRANSCRIBING) < shown
            # Both quote the voice message.
            for message in wa.bot_messages(thread):
                if message.text in (TRANSCRIBING, "🎤 add a test for the parser"):
                    assert message.context == audio["wamid"]
            # The two-step media download, once each, with the audio sent on as it came.
            assert wa.fake.media_lookups == [audio["id"]]
            assert wa.fake.media_downloads == [audio["id"]]
            (request,) = speech.requests
            assert request.audio == spoken
            assert (request.filename, request.content_type) == ("voice.ogg", "audio/ogg")
            assert request.authorization == "Bearer test-key"
    # The audio was never written to disk (the transcript is in the log, the audio not).
    on_disk = [p for p in tmp_path.rglob("*") if p.is_file() and spoken in p.read_bytes()]
    assert on_disk == []


async def test_without_transcription_a_voice_message_is_answered_not_sent(
    wa: WhatsAppWorld, tmp_path: Path
) -> None:
    async with whatsapp_stack(wa, tmp_path) as stack:
        thread = await stack.start_chat()
        user = wa.chat(thread)
        delivery = wa.fake.voice(user, b"SPEECH:hello")
        await wait_for(lambda: [m for m in wa.bot_messages(thread) if m.text == NO_TRANSCRIPTION])
        await wait_for(delivery.done.is_set)
        assert delivery.statuses == [200]  # told, not retried
        assert _delivered(stack) == []
        assert _logged(tmp_path, f"wa-{_audio(delivery)['wamid']}") == []
        assert wa.fake.media_lookups == [] and wa.fake.media_downloads == []
        assert TRANSCRIBING not in [m.text for m in wa.bot_messages(thread)]


async def test_a_failing_endpoint_is_told_and_nothing_reaches_the_agent(
    wa: WhatsAppWorld, tmp_path: Path
) -> None:
    with FakeTranscription() as speech:
        speech.fail_with = (503, "the model is overloaded")
        async with whatsapp_stack(wa, tmp_path, transcription=_config(speech)) as stack:
            thread = await stack.start_chat()
            user = wa.chat(thread)
            delivery = wa.fake.voice(user, b"SPEECH:hello")
            told = await wait_for(
                lambda: [m.text for m in wa.bot_messages(thread) if m.text.startswith("⚠")]
            )
            assert told == [
                "⚠ Could not transcribe the voice message: the transcription endpoint "
                "answered 503: the model is overloaded"
            ]
            await wait_for(delivery.done.is_set)
            assert delivery.statuses == [200]
            assert len(speech.requests) == 1
            assert _delivered(stack) == []
            assert _logged(tmp_path, f"wa-{_audio(delivery)['wamid']}") == []


async def test_a_redelivered_voice_message_runs_nothing_twice(
    wa: WhatsAppWorld, tmp_path: Path
) -> None:
    with FakeTranscription() as speech:
        async with whatsapp_stack(wa, tmp_path, transcription=_config(speech)) as stack:
            thread = await stack.start_chat()
            user = wa.chat(thread)
            first = wa.fake.voice(user, b"SPEECH:run the linter")
            await wait_for(first.done.is_set)
            again = wa.fake.redeliver(first)
            await wait_for(again.done.is_set)
            await stack.until_footers(thread, 1)
            assert again.statuses == [200]
            assert stack.app.whatsapp.ingress.duplicates == 1
            assert _delivered(stack) == ["run the linter"]
            assert len(speech.requests) == 1
            assert len(wa.fake.media_downloads) == 1
            texts = [m.text for m in wa.bot_messages(thread)]
            assert texts.count(TRANSCRIBING) == 1
            assert texts.count("🎤 run the linter") == 1
            assert len(_logged(tmp_path, f"wa-{_audio(first)['wamid']}")) == 1

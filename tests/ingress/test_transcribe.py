"""The transcription client against the fake OpenAI-compatible endpoint: multipart file and
model, the bearer key, the transcript; refusals and an unreachable endpoint are
``TranscriptionFailed`` with a reason."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from threadspindle.ingress.transcribe import (
    Transcriber,
    TranscriptionConfig,
    TranscriptionFailed,
)
from threadspindle.testkit.fake_transcription import FakeTranscription


def _transcriber(fake: FakeTranscription, key: str = "test-key", **kw) -> Transcriber:
    return Transcriber(
        TranscriptionConfig(base_url=fake.base_url, model="whisper-1", api_key=SecretStr(key), **kw)
    )


async def test_the_transcript_comes_back_and_the_request_is_multipart() -> None:
    with FakeTranscription() as fake:
        text = await _transcriber(fake).transcribe(
            b"SPEECH: check the CI please ", "voice-message.ogg", "audio/ogg"
        )
        assert text == "check the CI please"
        (request,) = fake.requests
        assert request.model == "whisper-1" and request.filename == "voice-message.ogg"
        assert request.content_type == "audio/ogg"
        assert request.authorization == "Bearer test-key"
        assert request.fields["response_format"] == "json"


async def test_a_wrong_key_a_refusal_and_no_endpoint_say_why() -> None:
    with FakeTranscription() as fake:
        with pytest.raises(TranscriptionFailed, match="401: Incorrect API key"):
            await _transcriber(fake, key="nope").transcribe(b"SPEECH:x", "v.ogg", None)
        fake.fail_with = (500, "model overloaded")
        with pytest.raises(TranscriptionFailed, match="500: model overloaded"):
            await _transcriber(fake).transcribe(b"SPEECH:x", "v.ogg", None)
        fake.fail_with = None
        with pytest.raises(TranscriptionFailed, match="over the 1 KiB"):
            await _transcriber(fake, max_bytes=1024).transcribe(b"x" * 4096, "v.ogg", None)
        url = fake.base_url
    broken = Transcriber(TranscriptionConfig(base_url=url, timeout_s=2.0))
    with pytest.raises(TranscriptionFailed, match="unreachable"):
        await broken.transcribe(b"SPEECH:x", "v.ogg", None)


async def test_silence_is_no_prompt() -> None:
    with FakeTranscription() as fake:
        with pytest.raises(TranscriptionFailed, match="nothing was heard"):
            await _transcriber(fake).transcribe(b"SPEECH:   ", "v.ogg", None)

"""Voice messages -> text: an OpenAI-compatible ``POST {base_url}/audio/transcriptions``
(OpenAI, Groq, a local whisper server) with httpx, multipart ``file`` and ``model``.

Ingress calls it for a voice message (a Discord voice note, a Telegram voice) before it
makes the prompt: the transcript, never the attachment, is what the agent reads. The API
key is a ``SecretStr`` (never logged); the audio is sent as it came (Opus in Ogg for both
platforms, which every such endpoint takes).
"""

from __future__ import annotations

import httpx
from pydantic import SecretStr

from threadspindle.runtime.core.frozen import Frozen

__all__ = [
    "TRANSCRIBING",
    "TranscriptionConfig",
    "TranscriptionFailed",
    "Transcriber",
    "transcript_notice",
]

TRANSCRIBING = "🎤 Transcribing…"


def transcript_notice(text: str) -> str:
    """What the thread shows once the voice message is text."""
    return f"🎤 {text}"


class TranscriptionConfig(Frozen):
    base_url: str = "https://api.openai.com/v1"
    model: str = "whisper-1"
    api_key: SecretStr | None = None
    timeout_s: float = 60.0
    max_bytes: int = 25 * 1024 * 1024  # OpenAI's limit for one file
    language: str | None = None  # ISO-639-1 hint; None: the endpoint detects it


class TranscriptionFailed(Exception):
    """The endpoint refused or could not be reached; ``str()`` says why, for the user."""


class Transcriber:
    def __init__(self, config: TranscriptionConfig) -> None:
        self.config = config
        self.calls = 0

    async def transcribe(self, audio: bytes, filename: str, content_type: str | None) -> str:
        config = self.config
        if len(audio) > config.max_bytes:
            raise TranscriptionFailed(
                f"the voice message is {len(audio) // 1024} KiB, over the "
                f"{config.max_bytes // 1024} KiB the transcription endpoint takes"
            )
        headers = {}
        if config.api_key is not None:
            headers["Authorization"] = f"Bearer {config.api_key.get_secret_value()}"
        data = {"model": config.model, "response_format": "json"}
        if config.language:
            data["language"] = config.language
        files = {"file": (filename or "voice.ogg", audio, content_type or "audio/ogg")}
        url = config.base_url.rstrip("/") + "/audio/transcriptions"
        self.calls += 1
        try:
            async with httpx.AsyncClient(timeout=config.timeout_s) as client:
                response = await client.post(url, headers=headers, data=data, files=files)
        except httpx.HTTPError as error:
            raise TranscriptionFailed(
                f"the transcription endpoint is unreachable ({error})"
            ) from None
        if response.status_code != 200:
            raise TranscriptionFailed(
                f"the transcription endpoint answered {response.status_code}: "
                f"{_error_text(response)}"
            )
        try:
            text = response.json()["text"]
        except (ValueError, KeyError, TypeError):
            raise TranscriptionFailed("the transcription endpoint's answer has no text") from None
        if not isinstance(text, str) or not text.strip():
            raise TranscriptionFailed("nothing was heard in the voice message")
        return text.strip()


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
        message = body.get("error", {}).get("message") if isinstance(body, dict) else None
    except ValueError:
        message = None
    return (message or response.text or response.reason_phrase)[:200]

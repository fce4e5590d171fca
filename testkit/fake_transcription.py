"""A fake OpenAI-compatible transcription endpoint on 127.0.0.1 (any free port), for tests:
``POST /v1/audio/transcriptions`` (multipart ``file``, ``model``) answers
``{"text": ...}``. What it "hears" is the audio's bytes: a file whose content starts with
``SPEECH:`` is transcribed as the rest of it (so a test says what was spoken), anything
else as ``(n bytes of audio)``. It records every request (model, file name, content type,
the bearer token) and can be told to fail (``fail_with``). A thread of its own (stdlib
``ThreadingHTTPServer``), so it serves asyncio (discord.py) and trio callers alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

from threadspindle.testkit.http_thread import serving

__all__ = ["FakeTranscription", "TranscriptionRequest"]


@dataclass
class TranscriptionRequest:
    model: str
    filename: str
    content_type: str
    audio: bytes
    authorization: str | None
    fields: dict[str, str] = field(default_factory=dict)


class FakeTranscription:
    def __init__(self, api_key: str | None = "test-key") -> None:
        self.api_key = api_key
        self.requests: list[TranscriptionRequest] = []
        self.fail_with: tuple[int, str] | None = None  # (status, message) for the next calls
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = serving(self._server)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> FakeTranscription:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _answer(self, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, object]]:
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            return 401, {"error": {"message": "Incorrect API key provided"}}
        head = f"Content-Type: {headers.get('content-type', '')}\r\n\r\n".encode()
        message = BytesParser(policy=HTTP).parsebytes(head + body)
        if not message.is_multipart():
            return 400, {"error": {"message": "expected multipart/form-data"}}
        fields: dict[str, str] = {}
        audio, filename, content_type = b"", "", ""
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            raw = part.get_payload(decode=True)
            payload = raw if isinstance(raw, bytes) else b""
            if name == "file":
                audio = payload
                filename = part.get_filename() or ""
                content_type = part.get_content_type()
            elif isinstance(name, str):
                fields[name] = payload.decode()
        request = TranscriptionRequest(
            model=fields.get("model", ""),
            filename=filename,
            content_type=content_type,
            audio=audio,
            authorization=headers.get("authorization"),
            fields=fields,
        )
        self.requests.append(request)
        if self.fail_with is not None:
            status, text = self.fail_with
            return status, {"error": {"message": text}}
        if not request.model or not audio:
            return 400, {"error": {"message": "model and file are required"}}
        if audio.startswith(b"SPEECH:"):
            return 200, {"text": audio[len(b"SPEECH:") :].decode()}
        return 200, {"text": f"({len(audio)} bytes of audio)"}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                answer: dict[str, object]
                if self.path.rstrip("/") != "/v1/audio/transcriptions":
                    status, answer = 404, {"error": {"message": "not found"}}
                else:
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    status, answer = fake._answer(headers, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return  # quiet: tests read ``requests``

        return Handler

"""Who is calling: bearer tokens, per-thread scoping, and the HTTP guard in front of the app.

Two kinds of token, both checked in constant time:

- the **operator token** (the secret itself), held by Spindle and ``spindle mcp`` users. A
  request with it acts for the thread named in the ``X-Spindle-Thread`` header (and may name
  a default working directory in ``X-Spindle-Workdir``); without that header it acts as the
  operator, who sees every thread's processes. ``spindle run`` keeps it in memory only.
- a **thread token**, ``spt1.<thread id, base64url>.<HMAC-SHA256(secret, thread id)>``,
  which Spindle hands to the agent it launches for that thread (it fits the agents' plain
  ``bearer_token`` MCP config, no custom header needed). It can only ever act for its own
  thread: a header naming another thread, or a workdir, is ignored. Thread tokens are
  derived, not stored, so they survive a restart of Spindle as long as the secret does.

The guard answers 401 to a request without a valid token and 403 to a client that is not on
loopback (the listener is bound to loopback anyway; this is the second lock).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CALLER_SCOPE_KEY",
    "OPERATOR",
    "THREAD_HEADER",
    "WORKDIR_HEADER",
    "BearerGuard",
    "Caller",
    "TokenAuthority",
    "load_or_create_secret",
]

THREAD_HEADER = "x-spindle-thread"
WORKDIR_HEADER = "x-spindle-workdir"
OPERATOR = "_operator"  # the thread id of operator requests that name no thread
# Where the guard leaves the caller's thread id in a request's ASGI scope, for the
# middleware behind it (``session_quota``).
CALLER_SCOPE_KEY = "spindle.caller_thread"
_PREFIX = "spt1"


@dataclass(frozen=True, slots=True)
class Caller:
    thread_id: str
    workdir: str | None = None
    sees_all: bool = False  # the operator without a thread header


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenAuthority:
    """Issues thread tokens and identifies the caller of a request from its headers."""

    def __init__(self, secret: str) -> None:
        if len(secret) < 16:
            raise ValueError("the process manager's token must be at least 16 characters")
        self.secret = secret
        self._key = secret.encode()

    def _mac(self, thread_id: str) -> str:
        return _b64(hmac.new(self._key, thread_id.encode(), hashlib.sha256).digest())

    def thread_token(self, thread_id: str) -> str:
        return f"{_PREFIX}.{_b64(thread_id.encode())}.{self._mac(thread_id)}"

    def identify(self, headers: Mapping[str, str]) -> Caller | None:
        """The caller a request's headers prove, or None (no token, or a wrong one)."""
        auth = _header(headers, "authorization") or ""
        scheme, _, token = auth.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        workdir = _header(headers, WORKDIR_HEADER) or None
        if hmac.compare_digest(token.encode(), self._key):
            thread = _header(headers, THREAD_HEADER)
            if thread:
                return Caller(thread_id=thread, workdir=workdir)
            return Caller(thread_id=OPERATOR, workdir=workdir, sees_all=True)
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != _PREFIX:
            return None
        try:
            thread_id = _unb64(parts[1]).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
        if not hmac.compare_digest(parts[2].encode(), self._mac(thread_id).encode()):
            return None
        # A thread token's workdir is the one Spindle bound to its thread, never a header:
        # an agent must not point its processes at another thread's workdir.
        return Caller(thread_id=thread_id)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    # Starlette's Headers and plain dicts alike: try the lower-case name, then any case.
    value = headers.get(name)
    if value is not None:
        return value
    for key, val in headers.items():
        if key.lower() == name:
            return val
    return None


def load_or_create_secret(data_dir: Path) -> str:
    """The operator token kept in ``<data_dir>/mcp-token`` (mode 0600), made on first use."""
    path = data_dir / "mcp-token"
    try:
        secret = path.read_text().strip()
        if len(secret) >= 16:
            return secret
    except FileNotFoundError:
        pass
    data_dir.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
    return secret


def _is_loopback_client(scope: Mapping[str, Any]) -> bool:
    client = scope.get("client")
    if not client:
        return True  # a Unix socket or an in-process call: nothing to check
    try:
        return ipaddress.ip_address(client[0]).is_loopback
    except ValueError:
        return False


class BearerGuard:
    """ASGI middleware: loopback clients with a valid bearer token only."""

    def __init__(self, app: Any, authority: TokenAuthority) -> None:
        self.app = app
        self.authority = authority
        self.refused = 0  # requests answered 401/403
        self.accepted = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not _is_loopback_client(scope):
            await self._refuse(send, 403, "loopback clients only")
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        caller = self.authority.identify(headers)
        if caller is None:
            await self._refuse(send, 401, "a valid bearer token is required")
            return
        self.accepted += 1
        await self.app({**scope, CALLER_SCOPE_KEY: caller.thread_id}, receive, send)

    async def _refuse(self, send: Any, status: int, message: str) -> None:
        self.refused += 1
        body = json.dumps({"error": message}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        if status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="spindle-process-manager"'))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

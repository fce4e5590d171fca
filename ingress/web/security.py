"""Who may use the web chat, checked on every request before anything else runs.

- **The token**: a random one per start, printed once in the URL
  (``http://spindle-<hex>.localhost:PORT/?token=...``). A request that carries it in the
  query gets it as an ``HttpOnly; SameSite=Strict`` cookie and is redirected to the same
  page under the chat's own path (below) without it (so it stays out of the history and of
  any referrer). Every other request needs the cookie: compared in constant time. The
  cookie is named after the port (``spindle_web_<port>``): a browser scopes cookies by host
  name, not port, so with one name two Spindles on one machine overwrote each other's
  cookie (each logged the other out).
- **A host name and a path of its own, new at every start** (``own_name``, ``own_path``):
  that same scoping sends the cookie to every server opened under the chat's host name,
  whatever its port. Under ``127.0.0.1``, or under a fixed name, an agent's server on
  another port of loopback would receive it as soon as the user opened a link the agent
  wrote with that host name and its own port (``http://127.0.0.1:3000``), and could then
  drive the chat: answer its own permission prompts, read other threads. Browsers resolve
  ``*.localhost`` to loopback themselves; ``spindle-<hex>.localhost``, derived from the
  token, is a name no agent can know. A browser that cannot resolve it (Safari may not)
  is pointed at ``127.0.0.1``, so the cookie's ``Path`` is the chat's own too: every page
  lives under ``/s/<32 hex digits>`` (also derived from the token), and a browser sends the
  cookie only with requests under that path, which no link an agent writes can name.
  Neither is given away by a referrer (``same-origin``) or to anyone without the token (a
  request outside the path is refused, never redirected into it).
- **State changes** (every ``POST``) also need an ``Origin`` header naming this server
  (a page of another site cannot post, even with the user's cookie; a request with no
  ``Origin`` is refused).
- **The Host header** must be one this server answers to (a DNS-rebinding page gets 421):
  on loopback ``127.0.0.1``, ``localhost`` and the start's own name, with the port.
- **Headers on every answer**: a Content-Security-Policy that allows only this server's
  own scripts, styles and connections (no inline script, nothing from another site: every
  asset ships in the package), no framing, no referrer to other sites, no MIME sniffing.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlsplit

__all__ = [
    "SECURITY_HEADERS",
    "allowed_hosts",
    "cookie_header",
    "cookie_name",
    "host_ok",
    "origin_ok",
    "own_name",
    "own_path",
    "token_ok",
]

SECURITY_HEADERS: dict[str, str] = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    # Not no-referrer: with it a form POST says "Origin: null" and could not be told apart
    # from another site's; same-origin sends nothing to other sites either.
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


def token_ok(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def own_name(token: str) -> str:
    """The web chat's host name on loopback for the start whose token is ``token`` (see
    the module docstring): ``spindle-`` and 12 hex digits of a hash of the token, under
    ``.localhost``. The token cannot be had from it."""
    return f"spindle-{_derived(b'host name', token)[:12]}.localhost"


def own_path(token: str) -> str:
    """The path every page of the start whose token is ``token`` lives under, and its
    cookie's ``Path`` (see the module docstring): ``/s/`` and 32 hex digits of a hash of the
    token, no slash at the end. The token cannot be had from it."""
    return f"/s/{_derived(b'path', token)[:32]}"


def _derived(purpose: bytes, token: str) -> str:
    """A hash of the token for one purpose (hex): each purpose's differs, none gives it away."""
    return hashlib.sha256(b"spindle web chat " + purpose + b"\0" + token.encode()).hexdigest()


def allowed_hosts(host: str, port: int, token: str) -> frozenset[str]:
    """The ``Host`` values this server answers to (on loopback, the start's own name too:
    ``own_name(token)``)."""
    loopback = host in ("127.0.0.1", "localhost")
    names = {host, "localhost", "127.0.0.1", own_name(token)} if loopback else {host}
    shown = {f"[{n}]" if ":" in n and not n.startswith("[") else n for n in names}
    return frozenset(f"{n}:{port}" for n in shown)


def host_ok(host_header: str | None, hosts: frozenset[str]) -> bool:
    return host_header is not None and host_header.lower() in hosts


def origin_ok(origin: str | None, hosts: frozenset[str]) -> bool:
    """``Origin`` is ``http://<one of hosts>`` exactly (no path, no other scheme)."""
    if not origin:
        return False
    parts = urlsplit(origin)
    return parts.scheme == "http" and not parts.path and parts.netloc.lower() in hosts


def cookie_name(port: int) -> str:
    """The access cookie's name on this port (see the module docstring: one per port)."""
    return f"spindle_web_{port}"


def cookie_header(token: str, port: int) -> str:
    """The access cookie, sent back only with requests under ``own_path(token)``."""
    return f"{cookie_name(port)}={token}; Path={own_path(token)}; HttpOnly; SameSite=Strict"

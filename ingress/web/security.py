"""Who may use the web chat, checked on every request before anything else runs.

- **The token**: a random one per start, printed once in the URL
  (``http://127.0.0.1:PORT/?token=...``). A request that carries it in the query gets it
  as an ``HttpOnly; SameSite=Strict`` cookie and is redirected to the same page without
  it (so it stays out of the history and of any referrer). Every other request needs the
  cookie: compared in constant time. The cookie is named after the port
  (``spindle_web_<port>``): a browser scopes cookies by host name, not port, so with one
  name two Spindles on one machine overwrote each other's cookie (each logged the other
  out). That scoping also means every server on the same host name (an agent's dev server
  on 127.0.0.1:3000) receives the cookie: docs/web.md says so and how to avoid it
  (``spindle.localhost``, a name of the web chat's own that browsers resolve to loopback).
- **State changes** (every ``POST``) also need an ``Origin`` header naming this server
  (a page of another site cannot post, even with the user's cookie; a request with no
  ``Origin`` is refused).
- **The Host header** must be one this server answers to (a DNS-rebinding page gets 421):
  on loopback ``127.0.0.1``, ``localhost`` and ``spindle.localhost``, with the port.
- **Headers on every answer**: a Content-Security-Policy that allows only this server's
  own scripts, styles and connections (no inline script, nothing from another site: every
  asset ships in the package), no framing, no referrer to other sites, no MIME sniffing.
"""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

__all__ = [
    "OWN_NAME",
    "SECURITY_HEADERS",
    "allowed_hosts",
    "cookie_header",
    "cookie_name",
    "host_ok",
    "origin_ok",
    "token_ok",
]

# A host name of the web chat's own: browsers resolve ``*.localhost`` to loopback without
# asking DNS, and a cookie set for it is not sent to servers on 127.0.0.1 or localhost.
OWN_NAME = "spindle.localhost"

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


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """The ``Host`` values this server answers to."""
    loopback = host in ("127.0.0.1", "localhost")
    names = {host, "localhost", "127.0.0.1", OWN_NAME} if loopback else {host}
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
    return f"{cookie_name(port)}={token}; Path=/; HttpOnly; SameSite=Strict"

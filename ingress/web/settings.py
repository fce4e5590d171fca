"""``WebSettings``: what the web chat needs from Spindle's configuration, as one value.

Made by ``web_settings_from_config`` from ``[web]`` and ``[runtime]``: where to listen
(loopback by default), the agents a conversation may be started with, the directories
offered as workdirs (the allowed roots: the core judges the one chosen, as for every
platform) and the access token (a fresh random one per start unless the tests set one).
"""

from __future__ import annotations

import ipaddress
import os
import secrets

from threadspindle.runtime.core.frozen import Frozen

__all__ = ["WebSettings", "is_loopback", "new_token"]


def new_token() -> str:
    """A random access token (printed once, carried by the start URL, then a cookie)."""
    return secrets.token_urlsafe(24)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class WebSettings(Frozen):
    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port
    token: str
    agents: tuple[str, ...] = ("echo",)
    default_agent: str = "echo"
    default_workdir: str = "~"
    allowed_roots: tuple[str, ...] = ("~",)

    def roots(self) -> tuple[str, ...]:
        """The allowed roots as real paths (what the workdir picker offers)."""
        return tuple(os.path.realpath(os.path.expanduser(r)) for r in self.allowed_roots)

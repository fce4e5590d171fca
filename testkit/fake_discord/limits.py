"""Discord's rate limits as Discord documents them, for the fake's REST API (opt-in:
``FakeDiscord(rate_limits=DiscordRateLimits())`` or ``fake.enforce_rate_limits()``).

- **Global**: at most ``global_limit`` requests per ``global_window_s`` for the bot, in
  fixed windows that start with the first request after the last one ended. Interaction
  callbacks and followups (``/interactions``, ``/webhooks``) are exempt, as on Discord.
  Over it: 429 with ``"global": true``, ``X-RateLimit-Global: true`` and
  ``X-RateLimit-Scope: global``.
- **Per route**: each ``RouteBucket`` counts per *major parameter* (the channel, or the
  interaction token), e.g. 5 message sends and 5 edits per 5 s per channel. Every answer
  on such a route carries ``X-RateLimit-Limit``, ``-Remaining``, ``-Reset``,
  ``-Reset-After`` and ``-Bucket``; over it: 429 with ``X-RateLimit-Scope: user``.
- Every 429 carries ``Retry-After`` (seconds)
  and ``retry_after`` in its body (exact), and a ``Via`` header (discord.py takes a 429
  without one for a Cloudflare ban). A refused request counts against nothing.

``responses_429`` counts the 429s by scope; ``requests`` counts what reached the limits.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["DISCORD_ROUTE_BUCKETS", "DiscordRateLimits", "RouteBucket"]


@dataclass(frozen=True)
class RouteBucket:
    """``limit`` requests per ``per_s`` on ``method`` paths matching ``pattern``, counted
    per the pattern's ``major`` group."""

    name: str
    method: str
    pattern: str
    limit: int
    per_s: float

    def major(self, method: str, path: str) -> str | None:
        if method != self.method:
            return None
        match = re.fullmatch(self.pattern, path)
        return match.group("major") if match else None


DISCORD_ROUTE_BUCKETS = (
    RouteBucket("send", "POST", r"/channels/(?P<major>\d+)/messages", 5, 5.0),
    RouteBucket("edit", "PATCH", r"/channels/(?P<major>\d+)/messages/\d+", 5, 5.0),
    RouteBucket("delete", "DELETE", r"/channels/(?P<major>\d+)/messages/\d+", 5, 1.0),
    RouteBucket("typing", "POST", r"/channels/(?P<major>\d+)/typing", 5, 5.0),
    RouteBucket("followup", "POST", r"/webhooks/\d+/(?P<major>[^/]+)", 5, 2.0),
)

_GLOBAL_EXEMPT = re.compile(r"^/(interactions|webhooks)/")


@dataclass
class _Window:
    start: float = -math.inf
    used: int = 0


@dataclass
class DiscordRateLimits:
    global_limit: int = 50
    global_window_s: float = 1.0
    buckets: tuple[RouteBucket, ...] = DISCORD_ROUTE_BUCKETS
    requests: int = 0
    responses_429: Counter[str] = field(default_factory=Counter)  # scope -> 429s sent
    _global: _Window = field(default_factory=_Window)
    _windows: dict[tuple[str, str], _Window] = field(default_factory=dict)

    def check(self, method: str, path: str, now: float) -> tuple[dict[str, str], float | None]:
        """(headers, None) when the request may go, and it is counted; (headers, retry
        after) for a 429."""
        self.requests += 1
        headers: dict[str, str] = {}
        route: tuple[RouteBucket, _Window] | None = None
        for bucket in self.buckets:
            major = bucket.major(method, path)
            if major is None:
                continue
            window = self._windows.setdefault((bucket.name, major), _Window())
            if now >= window.start + bucket.per_s:
                window.start, window.used = now, 0
            reset_after = window.start + bucket.per_s - now
            headers = {
                "X-RateLimit-Limit": str(bucket.limit),
                "X-RateLimit-Reset-After": f"{reset_after:.3f}",
                "X-RateLimit-Reset": f"{window.start + bucket.per_s:.3f}",
                "X-RateLimit-Bucket": f"fake-{bucket.name}",
            }
            if window.used >= bucket.limit:
                headers["X-RateLimit-Remaining"] = "0"
                headers["X-RateLimit-Scope"] = "user"
                self.responses_429["user"] += 1
                return headers, reset_after
            route = (bucket, window)
            break
        if not _GLOBAL_EXEMPT.match(path):
            window = self._global
            if now >= window.start + self.global_window_s:
                window.start, window.used = now, 0
            if window.used >= self.global_limit:
                self.responses_429["global"] += 1
                retry_after = window.start + self.global_window_s - now
                return headers | {"X-RateLimit-Global": "true", "X-RateLimit-Scope": "global"}, (
                    retry_after
                )
            window.used += 1
        if route is not None:
            bucket, window = route
            window.used += 1
            headers["X-RateLimit-Remaining"] = str(bucket.limit - window.used)
        return headers, None

    def statistics(self) -> dict[str, int]:
        return {
            "requests": self.requests,
            "429_global": self.responses_429["global"],
            "429_route": self.responses_429["user"],
        }

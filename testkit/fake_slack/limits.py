"""Slack's rate limits as Slack documents them, for the fake Web API (opt-in:
``FakeSlack(rate_limits=SlackRateLimits())`` or ``fake.enforce_rate_limits()``).

Slack's "Rate limits" page: limits apply per method per workspace per app, in tiers of
calls a minute (Tier 1: 1+, Tier 2: 20+, Tier 3: 50+, Tier 4: 100+, "sporadic bursts"
welcome), and ``chat.postMessage`` is special: "generally allows posting one message per
second per channel", short bursts allowed, "while also maintaining a workspace-wide limit"
(not published, so not enforced here). Each method's page names its tier; the methods
Spindle calls:

- ``chat.update``, ``chat.delete``, ``conversations.replies``, ``conversations.history``:
  Tier 3, 50 a minute (``tier3_limit`` per ``tier_window_s``) for the workspace;
- ``chat.postEphemeral``, ``files.getUploadURLExternal``, ``files.completeUploadExternal``:
  Tier 4, 100 a minute;
- ``chat.postMessage``: ``post_limit`` per ``post_window_s`` in one channel (5 in any 5 s:
  one a second with a short burst; Slack gives no burst size, this is Discord's documented
  shape for the same rate).

Methods whose limits Slack calls special and does not publish (``assistant.threads.*``,
``auth.test``, ``apps.connections.open``) are not limited. Each limit is a sliding window
over the times of the calls it let through, the floor of its tier. Over one: HTTP 429,
``{"ok": false, "error": "ratelimited"}`` and ``Retry-After`` in whole seconds (the server
rounds it up). A refused call counts against nothing. ``responses_429`` counts the 429s by
the method refused.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field

from threadspindle.testkit.sliding_window import free_at

__all__ = ["TIER3_METHODS", "TIER4_METHODS", "SlackRateLimits"]

TIER3_METHODS = frozenset(
    {"chat.update", "chat.delete", "conversations.replies", "conversations.history"}
)
TIER4_METHODS = frozenset(
    {"chat.postEphemeral", "files.getUploadURLExternal", "files.completeUploadExternal"}
)


@dataclass
class SlackRateLimits:
    tier3_limit: int = 50
    tier4_limit: int = 100
    tier_window_s: float = 60.0
    post_limit: int = 5
    post_window_s: float = 5.0
    calls: int = 0  # calls of a limited method that reached the limits
    responses_429: Counter[str] = field(default_factory=Counter)  # method -> 429s sent
    _methods: dict[str, deque[float]] = field(default_factory=dict)
    _posts: dict[str, deque[float]] = field(default_factory=dict)

    def check(self, method: str, channel: object, now: float) -> int | None:
        """None when the call may go (it is counted); else the ``Retry-After`` of its
        429, in whole seconds."""
        if method == "chat.postMessage":
            key = str(channel)
            times = self._posts.setdefault(key, deque())
            limit, window = self.post_limit, self.post_window_s
        elif method in TIER3_METHODS or method in TIER4_METHODS:
            times = self._methods.setdefault(method, deque())
            limit = self.tier3_limit if method in TIER3_METHODS else self.tier4_limit
            window = self.tier_window_s
        else:
            return None
        self.calls += 1
        at = free_at(times, limit, window, now)
        if at > now:
            self.responses_429[method] += 1
            return max(1, math.ceil(at - now))
        times.append(now)
        return None

    def statistics(self) -> dict[str, int]:
        return {
            "calls": self.calls,
            "429": sum(self.responses_429.values()),
            **{f"429 {method}": n for method, n in sorted(self.responses_429.items())},
        }

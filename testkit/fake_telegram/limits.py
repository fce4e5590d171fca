"""Telegram's rate limits as Telegram documents them, for the fake Bot API (opt-in:
``FakeTelegram(rate_limits=TelegramRateLimits())`` or ``fake.enforce_rate_limits()``).

The Bot API FAQ ("My bot is hitting limits, how do I avoid this?") gives three figures,
all for *messages* a bot sends (here: the sending and editing methods in ``counted``):

- about **30 messages per second** overall (``global_limit`` per ``global_window_s``);
- **about one message per second in a chat**, "short bursts" allowed (``chat_limit``
  per ``chat_window_s``: 3 in any 3 s);
- **20 messages per minute in a group** (``group_limit`` per ``group_window_s``; a group
  is a chat with a negative id, and a forum's topics are all in it).

Telegram publishes no window shape, so each is a sliding window over the times of the
requests it let through. Over a limit: a 429 whose body is
``{"ok": false, "error_code": 429, "description": "Too Many Requests: retry after N",
"parameters": {"retry_after": N}}``, ``N`` the whole seconds until the request would go
(rounded up, as Telegram sends integers). A refused request counts against nothing.
``responses_429`` counts the 429s by the limit that refused them.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field

from threadspindle.testkit.sliding_window import free_at

__all__ = ["COUNTED_METHODS", "TelegramRateLimits"]

COUNTED_METHODS = frozenset(
    {
        "sendMessage",
        "editMessageText",
        "editMessageReplyMarkup",
        "editMessageCaption",
        "sendPhoto",
        "sendDocument",
        "sendVoice",
        "sendAudio",
        "sendMediaGroup",
        "copyMessage",
        "forwardMessage",
    }
)


@dataclass
class TelegramRateLimits:
    global_limit: int = 30
    global_window_s: float = 1.0
    chat_limit: int = 3
    chat_window_s: float = 3.0
    group_limit: int = 20
    group_window_s: float = 60.0
    counted: frozenset[str] = COUNTED_METHODS
    requests: int = 0  # counted requests that reached the limits
    responses_429: Counter[str] = field(default_factory=Counter)  # limit -> 429s sent
    _global: deque[float] = field(default_factory=deque)
    _chats: dict[int, deque[float]] = field(default_factory=dict)
    _groups: dict[int, deque[float]] = field(default_factory=dict)

    def check(self, method: str, chat_id: object, now: float) -> int | None:
        """None when the request may go (it is counted); else the ``retry_after`` of its
        429, in whole seconds."""
        if method not in self.counted:
            return None
        self.requests += 1
        chat = chat_id if isinstance(chat_id, int) else None
        waits: list[tuple[float, str]] = [
            (free_at(self._global, self.global_limit, self.global_window_s, now), "global")
        ]
        if chat is not None:
            per_chat = self._chats.setdefault(chat, deque())
            waits.append((free_at(per_chat, self.chat_limit, self.chat_window_s, now), "chat"))
            if chat < 0:
                group = self._groups.setdefault(chat, deque())
                waits.append((free_at(group, self.group_limit, self.group_window_s, now), "group"))
        at, limit = max(waits)
        if at > now:
            self.responses_429[limit] += 1
            return max(1, math.ceil(at - now))
        self._global.append(now)
        if chat is not None:
            self._chats[chat].append(now)
            if chat < 0:
                self._groups[chat].append(now)
        return None

    def statistics(self) -> dict[str, int]:
        return {
            "requests": self.requests,
            "429_global": self.responses_429["global"],
            "429_chat": self.responses_429["chat"],
            "429_group": self.responses_429["group"],
        }

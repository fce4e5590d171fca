"""``RefusalNotes``: who was told they may not drive agents here, and when, in bounded memory.

A sender not on the allow-list is told so in their own chat at most once per interval
(the platform's ``refusal_interval_s``). Anyone can write to a WhatsApp number or a
public bot, so the senders told were a map that grew by one entry for every stranger
for as long as the process ran. Here an entry is forgotten once its interval is over
(the sender would be told again anyway), and past ``limit`` entries the oldest go first:
a flood of strangers costs at most that much memory; a forgotten sender is only told
again sooner.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

__all__ = ["RefusalNotes"]

REMEMBERED = 10_000  # senders remembered at most


class RefusalNotes:
    def __init__(self, interval_s: float, limit: int = REMEMBERED) -> None:
        self.interval_s = interval_s
        self.limit = limit
        self._told: OrderedDict[Hashable, float] = OrderedDict()  # oldest first

    def due(self, sender: Hashable, now: float) -> bool:
        """Whether ``sender`` is to be told now; if so, it counts as told at ``now``."""
        told = self._told
        # Entries are in the order they were told, so the expired ones are at the front.
        while told and (now - next(iter(told.values())) >= self.interval_s):
            told.popitem(last=False)
        if sender in told:
            return False
        told[sender] = now
        while len(told) > self.limit:
            told.popitem(last=False)
        return True

    def __len__(self) -> int:
        return len(self._told)

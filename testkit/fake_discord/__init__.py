"""A local fake Discord (REST + gateway on 127.0.0.1) that the real discord.py client
connects to, with a test API to act as users, inject faults and read threads back."""

from threadspindle.testkit.fake_discord.limits import DiscordRateLimits, RouteBucket
from threadspindle.testkit.fake_discord.rest import Fault, RestCall
from threadspindle.testkit.fake_discord.server import FakeDiscord
from threadspindle.testkit.fake_discord.store import GeneratedBytes

__all__ = [
    "DiscordRateLimits",
    "FakeDiscord",
    "Fault",
    "GeneratedBytes",
    "RestCall",
    "RouteBucket",
]

"""The Discord ingress: discord.py hosted in trio via trio-asyncio; gateway events and
slash commands become runtime actions (``bot``), pure mapping rules in ``translate``."""

from ingress.discord.bot import IngressItem, SpindleBot
from ingress.discord.host import RuntimePort, hosted_bot, point_discord_at, run_bot
from ingress.discord.settings import DiscordSettings, ProjectChannel

__all__ = [
    "DiscordSettings",
    "IngressItem",
    "ProjectChannel",
    "RuntimePort",
    "SpindleBot",
    "hosted_bot",
    "point_discord_at",
    "run_bot",
]

"""Configuration of the Discord bot: token, where Discord is, who may drive agents, and
which channels are project channels.

``rest_base_url`` and ``gateway_url`` default to Discord's own; point them at a rate-limit
proxy (nirn-proxy) or, in tests, at ``testkit.fake_discord``. See docs/discord-setup.md.
"""

from __future__ import annotations

from typing import Any

from pydantic import field_validator

from threadspindle.agents import check_agent, check_agents
from threadspindle.ingress.discord.translate import PlainMessageMode
from threadspindle.ingress.transcribe import TranscriptionConfig
from threadspindle.runtime.core.frozen import Frozen

__all__ = [
    "AGENT_NAMES",
    "SLASH_AGENTS",
    "DiscordSettings",
    "ProjectChannel",
    "settings_from_config",
]

AGENT_NAMES = ("claude", "codex", "gemini", "opencode")
# Each gets its /<agent> start|resume|conversations commands; "echo" is the built-in demo.
SLASH_AGENTS = (*AGENT_NAMES, "echo")

DISCORD_REST_BASE = "https://discord.com/api/v10"
DISCORD_GATEWAY = "wss://gateway.discord.gg/"


class ProjectChannel(Frozen):
    """A channel where every top-level message starts a thread with this agent/workdir."""

    channel_id: int
    agent: str = "claude"
    workdir: str
    worktree: bool = False  # each new thread gets its own git worktree (docs/workspaces.md)
    plain_message: PlainMessageMode | None = None  # None: the bot's ``plain_message``
    # `!` commands in the agent's own shell (docs/workspaces.md); None: [workspaces]'s.
    shell_via_agent: bool | None = None

    _agent_known = field_validator("agent")(check_agent)


class DiscordSettings(Frozen):
    token: str
    rest_base_url: str = DISCORD_REST_BASE
    gateway_url: str = DISCORD_GATEWAY
    guild_ids: tuple[int, ...] = ()  # slash commands are registered in each of these
    allowed_user_ids: tuple[int, ...] = ()
    allowed_role_ids: tuple[int, ...] = ()
    project_channels: tuple[ProjectChannel, ...] = ()
    default_workdir: str = "~"
    agents: tuple[str, ...] = SLASH_AGENTS
    inline_text_limit: int = 64 * 1024  # text attachments up to this size are inlined
    # A larger attachment refuses its message (with a reply); see ingress/attachments.py.
    attachment_max_bytes: int = 25 * 1024 * 1024
    # discord.py sleeps through shorter 429s itself; longer ones surface as PlatformError
    # (discord.py raises anything below 30 s to 30 s).
    max_ratelimit_timeout_s: float = 30.0
    queue_suffix: str = " queue"
    steer_suffix: str = " steer"
    # How a message without a suffix is delivered while a run is active (per project
    # channel: its own ``plain_message``): "interrupt", "queue" or "steer".
    plain_message: PlainMessageMode = "interrupt"
    # How long discord.py waits for more GUILD_CREATEs before it reports ready.
    guild_ready_timeout_s: float = 2.0
    # Gateway nodes (docs/scale-out.md): this process holds these shards of ``shard_count``
    # (discord.py's AutoShardedClient); None: one unsharded connection, as ``spindle run``.
    shard_ids: tuple[int, ...] = ()
    shard_count: int | None = None
    # Voice messages are transcribed here (None: voice messages are refused with a reply).
    transcription: TranscriptionConfig | None = None

    _agents_known = field_validator("agents")(check_agents)

    def project_channel(self, channel_id: int) -> ProjectChannel | None:
        return next((p for p in self.project_channels if p.channel_id == channel_id), None)

    def plain_message_mode(self, channel_id: int | None) -> PlainMessageMode:
        """How a plain message in a thread of ``channel_id`` is delivered."""
        project = self.project_channel(channel_id) if channel_id is not None else None
        if project is not None and project.plain_message is not None:
            return project.plain_message
        return self.plain_message

    def shell_via_agent(self, channel_id: int | None) -> bool | None:
        """Whether `!` in a thread of ``channel_id`` goes to the agent's shell (None: the
        runtime's ``workspaces.shell_via_agent``)."""
        project = self.project_channel(channel_id) if channel_id is not None else None
        return project.shell_via_agent if project is not None else None

    def is_allowed(self, user_id: int, role_ids: tuple[int, ...] | list[int]) -> bool:
        """Allow-listed users, or members holding an allow-listed role. No list: nobody."""
        if user_id in self.allowed_user_ids:
            return True
        return any(role in self.allowed_role_ids for role in role_ids)


def settings_from_config(config: Any) -> DiscordSettings:
    """Build the bot's settings from the ``spindle`` configuration (``app.config.
    Settings``: its ``[discord]`` section, the token, and the first allowed root as the
    default workdir). Raises ``ValueError`` without a token."""
    token = config.token()
    if not token:
        raise ValueError("no Discord token: set SPINDLE_DISCORD_TOKEN or [discord] token")
    section = config.discord
    roots = list(config.runtime.allowed_roots) or ["~"]
    return DiscordSettings(
        token=token,
        rest_base_url=section.rest_base_url,
        gateway_url=section.gateway_url,
        guild_ids=tuple(section.guild_ids),
        allowed_user_ids=tuple(section.allowed_user_ids),
        allowed_role_ids=tuple(section.allowed_role_ids),
        project_channels=tuple(
            ProjectChannel(
                channel_id=int(channel_id),
                agent=p.agent,
                workdir=p.workdir,
                plain_message=p.plain_message,
                worktree=p.worktree,
                shell_via_agent=p.shell_via_agent,
            )
            for channel_id, p in section.project_channels.items()
        ),
        plain_message=section.plain_message,
        default_workdir=roots[0],
        attachment_max_bytes=int(section.attachment_max_mib * 1024 * 1024),
        transcription=config.transcription.config(),
    )

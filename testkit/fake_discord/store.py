"""The fake Discord's world, in memory: guilds, channels, threads, users, messages,
interactions, registered commands and typing events, and the JSON payloads Discord sends
for them.

Everything here is plain data touched only from the fake server's own event loop thread
(``server.FakeDiscord`` marshals test calls onto it), so there are no locks. Payload
shapes follow the Discord API v10 documents as far as discord.py 2.x reads them.
"""

from __future__ import annotations

import time
import urllib.parse
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "GeneratedBytes",
    "FakeAttachment",
    "FakeChannel",
    "FakeGuild",
    "FakeInteraction",
    "FakeMessage",
    "FakeUser",
    "World",
]

# Discord snowflakes: milliseconds since Discord's epoch shifted left 22 bits, plus
# sequence bits. Ours are made the same way (and strictly increasing), so that a message's
# id says when it was posted, as clients rely on (history ``after`` a point in time).
_DISCORD_EPOCH_MS = 1_420_070_400_000


def snowflake_at(ts: float) -> int:
    return (int(ts * 1000) - _DISCORD_EPOCH_MS) << 22


TEXT_CHANNEL = 0
PUBLIC_THREAD = 11

HAS_THREAD = 1 << 5  # message flag: a thread was started from this message

# All permissions: the fake never refuses the bot.
_ALL_PERMISSIONS = str((1 << 50) - 1)


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


@dataclass
class FakeUser:
    id: int
    name: str
    bot: bool = False
    role_ids: tuple[int, ...] = ()

    def payload(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "username": self.name,
            "discriminator": "0",
            "global_name": self.name,
            "avatar": None,
            "bot": self.bot,
        }

    def member_payload(self, joined_at: float) -> dict[str, Any]:
        return {
            "user": self.payload(),
            "roles": [str(r) for r in self.role_ids],
            "joined_at": iso(joined_at),
            "deaf": False,
            "mute": False,
            "flags": 0,
            "permissions": _ALL_PERMISSIONS,
        }


@dataclass
class FakeGuild:
    id: int
    name: str
    owner_id: int
    role_ids: tuple[int, ...] = ()
    role_names: dict[int, str] = field(default_factory=dict)


@dataclass
class FakeChannel:
    id: int
    guild_id: int
    name: str
    type: int = TEXT_CHANNEL
    parent_id: int | None = None
    owner_id: int | None = None
    archived: bool = False
    deleted: bool = False
    created_at: float = field(default_factory=time.time)

    def payload(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": str(self.id),
            "type": self.type,
            "guild_id": str(self.guild_id),
            "name": self.name,
            "position": 0,
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": str(self.parent_id) if self.parent_id else None,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "flags": 0,
        }
        if self.type == PUBLIC_THREAD:
            data["owner_id"] = str(self.owner_id or 0)
            data["message_count"] = 0
            data["member_count"] = 1
            data["thread_metadata"] = {
                "archived": self.archived,
                "auto_archive_duration": 1440,
                "archive_timestamp": iso(self.created_at),
                "locked": False,
            }
        else:
            data["topic"] = None
        return data


@dataclass(frozen=True)
class GeneratedBytes:
    """Attachment content made while it is served (``size`` bytes of ``x``, streamed), so a
    test can send hundreds of MiB without holding them; ``declared`` is the size the
    message payload claims (a lie when it differs from ``size``)."""

    size: int
    declared: int | None = None


@dataclass
class FakeAttachment:
    id: int
    filename: str
    content: bytes | GeneratedBytes
    content_type: str | None = None
    duration_secs: float | None = None  # a voice message's note (with a waveform)

    @property
    def declared_size(self) -> int:
        if isinstance(self.content, GeneratedBytes):
            return self.content.size if self.content.declared is None else self.content.declared
        return len(self.content)

    def payload(self, base_url: str) -> dict[str, Any]:
        # Any file name (a NUL, a slash, 300 characters) survives in the URL, quoted.
        url = f"{base_url}/attachments/{self.id}/{urllib.parse.quote(self.filename, safe='')}"
        data: dict[str, Any] = {
            "id": str(self.id),
            "filename": self.filename,
            "size": self.declared_size,
            "url": url,
            "proxy_url": url,
        }
        if self.content_type:
            data["content_type"] = self.content_type
        if self.duration_secs is not None:
            data["duration_secs"] = self.duration_secs
            data["waveform"] = "AAAAAAAAAAA="  # base64 of the amplitude samples
        return data


@dataclass
class FakeMessage:
    id: int
    channel_id: int
    guild_id: int
    author_id: int
    content: str
    created_at: float
    edited_at: float | None = None
    deleted: bool = False
    flags: int = 0
    components: list[dict[str, Any]] = field(default_factory=list)
    attachments: list[FakeAttachment] = field(default_factory=list)
    nonce: str | None = None
    ephemeral: bool = False
    interaction_id: int | None = None  # a followup or response of this interaction
    webhook_id: int | None = None
    edits: int = 0
    allowed_mentions: dict[str, Any] | None = None  # as the bot sent it (None: not given)
    reply_to: int | None = None  # the message it answers (its message_reference)
    stickers: list[str] = field(default_factory=list)  # names of the stickers it carries

    def payload(self, world: World) -> dict[str, Any]:
        author = world.users[self.author_id]
        data: dict[str, Any] = {
            "id": str(self.id),
            "channel_id": str(self.channel_id),
            "guild_id": str(self.guild_id),
            "author": author.payload(),
            "content": self.content,
            "timestamp": iso(self.created_at),
            "edited_timestamp": iso(self.edited_at) if self.edited_at else None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [a.payload(world.base_url) for a in self.attachments],
            "embeds": [],
            "pinned": False,
            "type": 0,
            "flags": self.flags,
            "components": self.components,
        }
        if self.nonce is not None:
            data["nonce"] = self.nonce
        if self.stickers:
            data["sticker_items"] = [
                {"id": str(1000 + n), "name": name, "format_type": 1}
                for n, name in enumerate(self.stickers)
            ]
        if self.webhook_id is not None:
            data["webhook_id"] = str(self.webhook_id)
            data["application_id"] = str(self.webhook_id)
        return data

    def gateway_payload(self, world: World) -> dict[str, Any]:
        data = self.payload(world)
        data["member"] = {
            k: v for k, v in world.users[self.author_id].member_payload(0).items() if k != "user"
        }
        return data


@dataclass
class FakeInteraction:
    id: int
    token: str
    type: int  # 2 application command, 3 message component
    channel_id: int
    guild_id: int
    user_id: int
    data: dict[str, Any]
    message_id: int | None = None
    # (callback type, data) in the order they arrived
    callbacks: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    followup_ids: list[int] = field(default_factory=list)
    original_message_id: int | None = None
    ephemeral: bool = False
    created_at: float = field(default_factory=time.time)
    acknowledged_at: float | None = None  # Discord fails an interaction not answered in 3 s
    followed_up_at: list[float] = field(default_factory=list)  # when each followup came

    def payload(self, world: World) -> dict[str, Any]:
        user = world.users[self.user_id]
        channel = world.channels[self.channel_id]
        data: dict[str, Any] = {
            "id": str(self.id),
            "application_id": str(world.application_id),
            "type": self.type,
            "data": self.data,
            "guild_id": str(self.guild_id),
            "channel_id": str(self.channel_id),
            "channel": channel.payload(),
            "member": user.member_payload(0),
            "token": self.token,
            "version": 1,
            "locale": "en-US",
            "guild_locale": "en-US",
            "app_permissions": _ALL_PERMISSIONS,
            "entitlements": [],
            "authorizing_integration_owners": {"0": str(self.guild_id)},
            "context": 0,
            "attachment_size_limit": 25 * 1024 * 1024,
        }
        if self.message_id is not None:
            data["message"] = world.messages[self.message_id].payload(world)
        return data


class World:
    """All the state of the fake Discord. ``base_url`` is the server's HTTP root."""

    def __init__(self) -> None:
        self._last_id = 0
        self.base_url = ""
        self.users: dict[int, FakeUser] = {}
        self.guilds: dict[int, FakeGuild] = {}
        self.channels: dict[int, FakeChannel] = {}
        self.messages: dict[int, FakeMessage] = {}
        self.interactions: dict[int, FakeInteraction] = {}
        self.interactions_by_token: dict[str, FakeInteraction] = {}
        self.attachments: dict[int, FakeAttachment] = {}
        self.commands: dict[int | None, list[dict[str, Any]]] = {}  # guild id (None: global)
        self.typing: dict[int, list[float]] = {}
        self.bot = FakeUser(self.next_id(), "spindle", bot=True)
        self.users[self.bot.id] = self.bot
        self.application_id = self.bot.id

    def next_id(self) -> int:
        self._last_id = max(self._last_id + 1, snowflake_at(time.time()))
        return self._last_id

    # --- building the world -----------------------------------------------------------

    def add_guild(self, name: str) -> FakeGuild:
        guild = FakeGuild(self.next_id(), name, owner_id=self.bot.id)
        guild.role_names[guild.id] = "@everyone"  # the @everyone role shares the guild id
        self.guilds[guild.id] = guild
        return guild

    def add_role(self, guild_id: int, name: str) -> int:
        role_id = self.next_id()
        guild = self.guilds[guild_id]
        guild.role_ids += (role_id,)
        guild.role_names[role_id] = name
        return role_id

    def add_user(self, name: str, *, bot: bool = False, role_ids: tuple[int, ...] = ()) -> FakeUser:
        user = FakeUser(self.next_id(), name, bot=bot, role_ids=role_ids)
        self.users[user.id] = user
        return user

    def add_channel(
        self, guild_id: int, name: str, *, parent_id: int | None = None, owner_id: int | None = None
    ) -> FakeChannel:
        kind = PUBLIC_THREAD if parent_id is not None else TEXT_CHANNEL
        channel = FakeChannel(
            self.next_id(), guild_id, name, type=kind, parent_id=parent_id, owner_id=owner_id
        )
        self.channels[channel.id] = channel
        return channel

    def add_message(
        self,
        channel_id: int,
        author_id: int,
        content: str,
        *,
        flags: int = 0,
        components: list[dict[str, Any]] | None = None,
        attachments: list[FakeAttachment] | None = None,
        nonce: str | None = None,
    ) -> FakeMessage:
        channel = self.channels[channel_id]
        message = FakeMessage(
            self.next_id(),
            channel_id,
            channel.guild_id,
            author_id,
            content,
            created_at=time.time(),
            flags=flags,
            components=components or [],
            attachments=attachments or [],
            nonce=nonce,
        )
        self.messages[message.id] = message
        return message

    def guild_payload(self, guild: FakeGuild) -> dict[str, Any]:
        roles = [
            {
                "id": str(role_id),
                "name": guild.role_names[role_id],
                "permissions": _ALL_PERMISSIONS,
                "position": i,
                "color": 0,
                "hoist": False,
                "managed": False,
                "mentionable": False,
                "flags": 0,
            }
            for i, role_id in enumerate((guild.id, *guild.role_ids))
        ]
        channels = [
            c.payload()
            for c in self.channels.values()
            if c.guild_id == guild.id and c.type == TEXT_CHANNEL and not c.deleted
        ]
        # As on Discord, only the active threads: an archived one is not in the cache.
        threads = [
            c.payload()
            for c in self.channels.values()
            if c.guild_id == guild.id
            and c.type == PUBLIC_THREAD
            and not c.deleted
            and not c.archived
        ]
        return {
            "id": str(guild.id),
            "name": guild.name,
            "icon": None,
            "owner_id": str(guild.owner_id),
            "roles": roles,
            "emojis": [],
            "stickers": [],
            "features": [],
            "channels": channels,
            "threads": threads,
            "members": [self.bot.member_payload(0)],
            "member_count": len(self.users),
            "presences": [],
            "voice_states": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
            "unavailable": False,
            "large": False,
            "premium_tier": 0,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "preferred_locale": "en-US",
            "system_channel_flags": 0,
            "joined_at": iso(0),
        }

    def visible_messages(self, channel_id: int) -> list[FakeMessage]:
        """The channel's messages as any member sees them: not deleted, not ephemeral."""
        return [
            m
            for m in self.messages.values()
            if m.channel_id == channel_id and not m.deleted and not m.ephemeral
        ]

    def history(
        self,
        channel_id: int,
        *,
        limit: int = 50,
        after: int | None = None,
        before: int | None = None,
    ) -> list[FakeMessage]:
        """``GET /channels/{id}/messages`` as Discord answers it: with ``after``, the
        ``limit`` oldest messages after it; otherwise the ``limit`` newest (before
        ``before``, when given). Newest first either way."""
        found = sorted(self.visible_messages(channel_id), key=lambda m: m.id)
        if before is not None:
            found = [m for m in found if m.id < before]
        if after is not None:
            page = [m for m in found if m.id > after][:limit]
        else:
            page = found[-limit:] if limit else []
        return page[::-1]

    def transcript(self, channel_id: int) -> str:
        lines = []
        for message in self.visible_messages(channel_id):
            author = self.users[message.author_id].name
            line = f"{author}: {message.content}"
            labels = [
                str(item.get("label") or item.get("custom_id"))
                for row in message.components
                for item in row.get("components", [])
            ]
            if labels:
                line += f"  [{' | '.join(labels)}]"
            lines.append(line)
        return "\n".join(lines)

"""``FakeDiscord``: a local Discord (REST + gateway) on 127.0.0.1 for the real discord.py
client, with a test API to act as users and read threads back.

The server runs in its own thread with its own asyncio loop, so it serves whatever the
test's event loop (trio, trio-asyncio) is doing. Every test-API call is marshalled onto
that loop and waits for its result: the world is only ever touched from one thread.

Pointing a client at it: ``discord.http.Route.BASE = fake.rest_base`` and
``DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(fake.gateway_url)`` (``ingress.discord``
does this from its settings).
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from aiohttp import web

from threadspindle.testkit.fake_discord.gateway import Gateway
from threadspindle.testkit.fake_discord.limits import DiscordRateLimits
from threadspindle.testkit.fake_discord.rest import Fault, RateLimit, RestApi, RestCall
from threadspindle.testkit.fake_discord.store import (
    PUBLIC_THREAD,
    FakeAttachment,
    FakeInteraction,
    FakeMessage,
    GeneratedBytes,
    World,
)

__all__ = ["FakeDiscord"]

T = TypeVar("T")

_OPTION_TYPES = {str: 3, int: 4, bool: 5, float: 10}
_SUBCOMMAND, _SUBCOMMAND_GROUP = 1, 2


class FakeDiscord:
    """Use as a context manager (``with FakeDiscord() as fake:``) or ``start()``/``stop()``."""

    def __init__(self, *, rate_limits: DiscordRateLimits | None = None) -> None:
        """``rate_limits``: enforce Discord's global limit and per-route buckets
        (``fake_discord.limits``) from the start; off by default."""
        self.world = World()
        self.gateway = Gateway(self.world)
        self.rest = RestApi(self.world, self.gateway)
        self.rest.discord_limits = rate_limits
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._stopped: asyncio.Event | None = None
        self.port = 0

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> FakeDiscord:
        started: Future[int] = Future()
        self._thread = threading.Thread(
            target=self._serve, args=(started,), name="fake-discord", daemon=True
        )
        self._thread.start()
        self.port = started.result(timeout=10)
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        loop, stopped = self._loop, self._stopped
        assert stopped is not None
        loop.call_soon_threadsafe(stopped.set)
        self._thread.join(timeout=10)
        self._loop = None

    def __enter__(self) -> FakeDiscord:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self, started: Future[int]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main(started))
        finally:
            loop.close()

    async def _main(self, started: Future[int]) -> None:
        self._stopped = asyncio.Event()
        app = web.Application()
        app.router.add_get("/gateway", self.gateway.handle)
        app.router.add_get("/attachments/{id}/{name:.*}", self._attachment)
        app.router.add_route("*", "/api/v10/{tail:.*}", self.rest.handle)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.world.base_url = f"http://127.0.0.1:{port}"
        self.gateway.url = f"ws://127.0.0.1:{port}/gateway"
        started.set_result(port)
        await self._stopped.wait()
        await self.gateway.disconnect(code=1001)
        await self._runner.cleanup()

    async def _attachment(self, request: web.Request) -> web.StreamResponse:
        attachment = self.world.attachments.get(int(request.match_info["id"]))
        if attachment is None:
            return web.Response(status=404)
        content_type = attachment.content_type or "application/octet-stream"
        if isinstance(attachment.content, GeneratedBytes):
            response = web.StreamResponse(headers={"Content-Type": content_type})
            await response.prepare(request)
            chunk = b"x" * 65536
            left = attachment.content.size
            try:
                while left > 0:
                    await response.write(chunk[: min(left, len(chunk))])
                    left -= len(chunk)
            except ConnectionError:
                return response  # the client stopped reading (a refused file): fine
            await response.write_eof()
            return response
        return web.Response(body=attachment.content, content_type=content_type)

    def _call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the server's loop and return its result."""
        assert self._loop is not None, "FakeDiscord is not started"

        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=10)

    # --- where the bot connects ---------------------------------------------------------

    @property
    def rest_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    @property
    def bot_user_id(self) -> int:
        return self.world.bot.id

    # --- building the world (before or after the bot connects) -----------------------

    def add_guild(self, name: str = "guild") -> int:
        def build() -> int:
            guild = self.world.add_guild(name)
            if self.gateway.shards:
                self.gateway.dispatch("GUILD_CREATE", self.world.guild_payload(guild))
            return guild.id

        return self._call(build)

    def add_role(self, guild_id: int, name: str) -> int:
        return self._call(lambda: self.world.add_role(guild_id, name))

    def add_user(self, name: str, *, bot: bool = False, role_ids: tuple[int, ...] = ()) -> int:
        return self._call(lambda: self.world.add_user(name, bot=bot, role_ids=role_ids).id)

    def add_channel(self, guild_id: int, name: str) -> int:
        def build() -> int:
            channel = self.world.add_channel(guild_id, name)
            self.gateway.dispatch("CHANNEL_CREATE", channel.payload())
            return channel.id

        return self._call(build)

    def create_thread(
        self, channel_id: int, name: str, owner_id: int, *, announce: bool = True
    ) -> int:
        """A user opens a thread in a channel. ``announce=False``: the bot is not told (a
        thread it never saw, e.g. archived while it was offline)."""

        def build() -> int:
            parent = self.world.channels[channel_id]
            thread = self.world.add_channel(
                parent.guild_id, name, parent_id=parent.id, owner_id=owner_id
            )
            if announce:
                self.gateway.dispatch("THREAD_CREATE", thread.payload() | {"newly_created": True})
            return thread.id

        return self._call(build)

    # --- acting as a user -------------------------------------------------------------

    def send_message(
        self,
        channel_id: int,
        author_id: int,
        content: str,
        *,
        attachments: tuple[tuple[str, bytes | GeneratedBytes, str | None], ...] = (),
        stickers: tuple[str, ...] = (),
    ) -> int:
        """Post as ``author_id``; ``attachments`` are (filename, content, content type),
        the content made while served when it is ``GeneratedBytes``; ``stickers``: the
        names of stickers sent with it (a sticker alone has no content)."""

        def act() -> int:
            files = []
            for filename, data, content_type in attachments:
                attachment = FakeAttachment(self.world.next_id(), filename, data, content_type)
                self.world.attachments[attachment.id] = attachment
                files.append(attachment)
            channel = self.world.channels[channel_id]
            if channel.archived:
                # As on Discord, a message in an archived thread brings it back.
                channel.archived = False
                self.gateway.dispatch("THREAD_UPDATE", channel.payload())
            message = self.world.add_message(channel_id, author_id, content, attachments=files)
            message.stickers = list(stickers)
            self.gateway.dispatch("MESSAGE_CREATE", message.gateway_payload(self.world))
            return message.id

        return self._call(act)

    def send_voice_message(
        self, channel_id: int, author_id: int, audio: bytes, *, duration_s: float = 2.5
    ) -> int:
        """A voice message as Discord's clients send one: no text, one Ogg/Opus attachment
        with its duration and waveform, the IS_VOICE_MESSAGE flag (8192)."""

        def act() -> int:
            attachment = FakeAttachment(
                self.world.next_id(), "voice-message.ogg", audio, "audio/ogg", duration_s
            )
            self.world.attachments[attachment.id] = attachment
            message = self.world.add_message(
                channel_id, author_id, "", flags=8192, attachments=[attachment]
            )
            self.gateway.dispatch("MESSAGE_CREATE", message.gateway_payload(self.world))
            return message.id

        return self._call(act)

    def redeliver_message(self, message_id: int) -> None:
        """Dispatch a message's MESSAGE_CREATE again, as an at-least-once gateway may."""

        def act() -> None:
            message = self.world.messages[message_id]
            self.gateway.dispatch("MESSAGE_CREATE", message.gateway_payload(self.world))

        self._call(act)

    def edit_message(self, message_id: int, content: str) -> None:
        def act() -> None:
            message = self.world.messages[message_id]
            message.content = content
            message.edited_at = time.time()
            message.edits += 1
            self.gateway.dispatch("MESSAGE_UPDATE", message.gateway_payload(self.world))

        self._call(act)

    def delete_message(self, message_id: int) -> None:
        def act() -> None:
            message = self.world.messages[message_id]
            message.deleted = True
            self.gateway.dispatch(
                "MESSAGE_DELETE",
                {
                    "id": str(message.id),
                    "channel_id": str(message.channel_id),
                    "guild_id": str(message.guild_id),
                },
            )

        self._call(act)

    def archive_thread(self, thread_id: int) -> None:
        def act() -> None:
            thread = self.world.channels[thread_id]
            thread.archived = True
            self.gateway.dispatch("THREAD_UPDATE", thread.payload())

        self._call(act)

    def delete_thread(self, thread_id: int) -> None:
        def act() -> None:
            thread = self.world.channels[thread_id]
            thread.deleted = True
            self.gateway.dispatch(
                "THREAD_DELETE",
                {
                    "id": str(thread.id),
                    "guild_id": str(thread.guild_id),
                    "parent_id": str(thread.parent_id),
                    "type": PUBLIC_THREAD,
                },
            )

        self._call(act)

    def run_command(self, channel_id: int, user_id: int, command: str, **options: Any) -> int:
        """Run a registered slash command: ``run_command(ch, user, "claude start",
        workdir="~/app")``. Returns the interaction id."""

        def act() -> int:
            data = self._command_data(channel_id, command, options)
            return self._interact(channel_id, user_id, 2, data).id

        return self._call(act)

    def _command_data(
        self, channel_id: int, command: str, options: dict[str, Any]
    ) -> dict[str, Any]:
        channel = self.world.channels[channel_id]
        names = command.split()
        registered = self._registered(channel.guild_id, names[0])
        data: dict[str, Any] = {
            "id": registered["id"],
            "name": names[0],
            "type": 1,
            "guild_id": str(channel.guild_id),
        }
        target, holder = registered, data
        for name in names[1:]:
            target = next(o for o in target.get("options", []) if o["name"] == name)
            child: dict[str, Any] = {"name": name, "type": target["type"]}
            holder["options"] = [child]
            holder = child
        holder["options"] = [
            {"name": key, "type": self._option_type(target, key, value), "value": value}
            for key, value in options.items()
            if value is not None
        ]
        return data

    def autocomplete(
        self, channel_id: int, user_id: int, command: str, focused: str, **options: Any
    ) -> int:
        """Type into option ``focused`` of a slash command (its value in ``options``);
        the bot's suggestions arrive as the interaction's type-8 callback."""

        def act() -> int:
            data = self._command_data(channel_id, command, options)
            holder = data
            while holder.get("options") and holder["options"][0]["type"] in (
                _SUBCOMMAND,
                _SUBCOMMAND_GROUP,
            ):
                holder = holder["options"][0]
            for option in holder.get("options", []):
                if option["name"] == focused:
                    option["focused"] = True
            return self._interact(channel_id, user_id, 4, data).id

        return self._call(act)

    def suggestions(self, interaction_id: int) -> list[dict[str, Any]] | None:
        """The choices the bot answered an autocomplete with (None: not answered yet)."""

        def read() -> list[dict[str, Any]] | None:
            for kind, data in self.world.interactions[interaction_id].callbacks:
                if kind == 8:
                    return copy.deepcopy(list(data.get("choices", [])))
            return None

        return self._call(read)

    def click_button(self, message_id: int, custom_id: str, user_id: int) -> int:
        def act() -> int:
            message = self.world.messages[message_id]
            data = {"custom_id": custom_id, "component_type": 2}
            return self._interact(message.channel_id, user_id, 3, data, message_id).id

        return self._call(act)

    def choose_option(
        self, message_id: int, custom_id: str, values: list[str], user_id: int
    ) -> int:
        def act() -> int:
            message = self.world.messages[message_id]
            data = {"custom_id": custom_id, "component_type": 3, "values": values}
            return self._interact(message.channel_id, user_id, 3, data, message_id).id

        return self._call(act)

    def _registered(self, guild_id: int, name: str) -> dict[str, Any]:
        for command in self.world.commands.get(guild_id, []) + self.world.commands.get(None, []):
            if command["name"] == name:
                return command
        raise KeyError(f"/{name} is not registered in guild {guild_id}")

    @staticmethod
    def _option_type(definition: dict[str, Any], key: str, value: Any) -> int:
        for option in definition.get("options", []):
            if option["name"] == key:
                return int(option["type"])
        return _OPTION_TYPES.get(type(value), 3)

    def _interact(
        self,
        channel_id: int,
        user_id: int,
        kind: int,
        data: dict[str, Any],
        message_id: int | None = None,
    ) -> FakeInteraction:
        channel = self.world.channels[channel_id]
        interaction = FakeInteraction(
            id=self.world.next_id(),
            token=f"tok{self.world.next_id()}",
            type=kind,
            channel_id=channel_id,
            guild_id=channel.guild_id,
            user_id=user_id,
            data=data,
            message_id=message_id,
        )
        self.world.interactions[interaction.id] = interaction
        self.world.interactions_by_token[interaction.token] = interaction
        self.gateway.dispatch("INTERACTION_CREATE", interaction.payload(self.world))
        return interaction

    # --- faults -----------------------------------------------------------------------

    def inject_fault(
        self,
        status: int,
        *,
        method: str | None = None,
        path_contains: str | None = None,
        skip: int = 0,
        times: int = 1,
        retry_after: float = 0.2,
    ) -> None:
        """Fail ``times`` matching REST calls with ``status`` after ``skip`` of them pass
        (so ``skip=n-1`` fails the Nth)."""
        fault = Fault(status, method, path_contains, skip, times, retry_after)
        self._call(lambda: self.rest.faults.append(fault))

    def rate_limit(
        self,
        limit: int,
        per_s: float,
        *,
        method: str | None = None,
        path_contains: str | None = None,
    ) -> None:
        """Enforce Discord-style per-channel buckets (with X-RateLimit-* headers) on
        matching calls from now on."""
        bucket = RateLimit(limit, per_s, method, path_contains)
        self._call(lambda: self.rest.rate_limits.append(bucket))

    def enforce_rate_limits(self, limits: DiscordRateLimits | None = None) -> DiscordRateLimits:
        """From now on, Discord's global limit and per-route buckets as documented
        (``fake_discord.limits``); returns them (``rate_limit_statistics`` reads them)."""
        chosen = limits or DiscordRateLimits()

        def install() -> DiscordRateLimits:
            self.rest.discord_limits = chosen
            return chosen

        return self._call(install)

    def record_contents(self) -> None:
        """From now on, keep (time, channel, message, content) of every bot message posted
        or edited (``contents``): what a reader saw, and when."""

        def start() -> None:
            self.rest.content_log = []

        self._call(start)

    def contents(self) -> list[tuple[float, int, int, str]]:
        return self._call(lambda: list(self.rest.content_log or []))

    def rate_limit_statistics(self) -> dict[str, int]:
        """Requests seen by the enforced limits and the 429s sent, by scope."""

        def read() -> dict[str, int]:
            limits = self.rest.discord_limits
            return limits.statistics() if limits is not None else {}

        return self._call(read)

    def disconnect_gateway(self, code: int = 4000) -> None:
        """Drop the bot's websocket; it resumes and gets every missed event replayed."""
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self.gateway.disconnect(code), self._loop).result(10)

    def invalidate_session(self, *, hold: bool = False) -> None:
        """End the bot's gateway session so that it cannot RESUME: it IDENTIFYs again and
        gets a fresh READY; what happens meanwhile is never delivered to it. ``hold``:
        it stays offline until ``release_gateway``."""
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(
            self.gateway.invalidate_session(hold=hold), self._loop
        ).result(10)

    def release_gateway(self) -> None:
        self._call(self.gateway.release)

    # --- reading back -----------------------------------------------------------------

    def messages(self, channel_id: int) -> list[FakeMessage]:
        """Copies of the channel's visible messages, oldest first."""
        return self._call(lambda: copy.deepcopy(self.world.visible_messages(channel_id)))

    def message(self, message_id: int) -> FakeMessage:
        return self._call(lambda: copy.deepcopy(self.world.messages[message_id]))

    def transcript(self, channel_id: int) -> str:
        """The channel as text: one ``author: content  [buttons]`` line per message."""
        return self._call(lambda: self.world.transcript(channel_id))

    def threads(self, parent_id: int) -> list[int]:
        return self._call(
            lambda: [
                c.id
                for c in self.world.channels.values()
                if c.parent_id == parent_id and not c.deleted
            ]
        )

    def interaction(self, interaction_id: int) -> FakeInteraction:
        return self._call(lambda: copy.deepcopy(self.world.interactions[interaction_id]))

    def interaction_replies(self, interaction_id: int) -> list[FakeMessage]:
        """The messages the bot answered an interaction with (ephemeral ones included)."""

        def read() -> list[FakeMessage]:
            interaction = self.world.interactions[interaction_id]
            ids = list(interaction.followup_ids)
            if interaction.original_message_id and interaction.original_message_id not in ids:
                ids.insert(0, interaction.original_message_id)
            found = [self.world.messages[i] for i in ids]
            shown = [m for m in found if (m.content or m.components) and not m.deleted]
            return copy.deepcopy(shown)

        return self._call(read)

    def typing_times(self, channel_id: int) -> list[float]:
        return self._call(lambda: list(self.world.typing.get(channel_id, [])))

    def rest_calls(self) -> list[RestCall]:
        return self._call(lambda: list(self.rest.calls))

    def commands(self, guild_id: int | None) -> list[dict[str, Any]]:
        return self._call(lambda: copy.deepcopy(self.world.commands.get(guild_id, [])))

    def gateway_counts(self) -> dict[str, int]:
        return self._call(
            lambda: {
                "identifies": self.gateway.identifies,
                "resumes": self.gateway.resumes,
                "invalid_sessions": self.gateway.invalid_sessions,
                "heartbeats": self.gateway.heartbeats,
            }
        )

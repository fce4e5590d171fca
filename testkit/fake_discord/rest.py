"""The fake Discord REST API: the routes discord.py calls, a log of every call, and
fault injection (429 with Retry-After, 5xx) on chosen calls.

Answers carry ``Content-Type: application/json`` exactly, as discord.py's
``json_or_text`` insists. A 429 carries a ``Via`` header (discord.py treats a 429 without
one as a Cloudflare ban) and ``retry_after`` in its body, so discord.py's own rate limiter
sleeps and retries it. With ``discord_limits`` (``fake_discord.limits``, opt-in) it enforces
Discord's global limit and per-route buckets as Discord documents them.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from threadspindle.testkit.fake_discord.gateway import Gateway
from threadspindle.testkit.fake_discord.limits import DiscordRateLimits
from threadspindle.testkit.fake_discord.store import (
    HAS_THREAD,
    PUBLIC_THREAD,
    FakeAttachment,
    FakeInteraction,
    FakeMessage,
    World,
)

__all__ = ["Fault", "RateLimit", "RestApi", "RestCall"]

EPHEMERAL = 64
UPLOAD_LIMIT_BYTES = 10 * 1024 * 1024  # a bot's upload limit in a guild without boosts
SUPPRESS_EMBEDS = 4


@dataclass(frozen=True)
class RestCall:
    at: float
    method: str
    path: str  # without the /api/v10 prefix and the query
    status: int
    peer_port: int = 0  # the client's TCP port: which process made it, when several do


@dataclass
class Fault:
    """Fail ``times`` matching calls with ``status`` after letting ``skip`` of them pass."""

    status: int
    method: str | None = None
    path_contains: str | None = None
    skip: int = 0
    times: int = 1
    retry_after: float = 0.2

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and (
            self.path_contains is None or self.path_contains in path
        )


@dataclass
class RateLimit:
    """A Discord-style bucket: ``limit`` calls per ``per_s`` seconds for each channel, on
    calls matching ``method`` and ``path_contains``. Answers carry the X-RateLimit-*
    headers discord.py paces itself by; a call over the limit gets a 429."""

    limit: int
    per_s: float
    method: str | None = None
    path_contains: str | None = None
    windows: dict[str, tuple[float, int]] = field(default_factory=dict)  # key -> (start, n)

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and (
            self.path_contains is None or self.path_contains in path
        )

    def take(self, path: str, now: float) -> tuple[dict[str, str], float | None]:
        """(headers, None) when allowed; (headers, retry_after) when over the limit."""
        channel = re.search(r"/channels/(\d+)", path)
        key = channel.group(1) if channel else path
        start, used = self.windows.get(key, (now, 0))
        if now >= start + self.per_s:
            start, used = now, 0
        reset_after = max(0.0, start + self.per_s - now)
        bucket = f"fake-{self.method}-{self.path_contains}"
        headers = {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Reset-After": f"{reset_after:.3f}",
            "X-RateLimit-Reset": f"{start + self.per_s:.3f}",
            "X-RateLimit-Bucket": bucket,
        }
        if used >= self.limit:
            headers["X-RateLimit-Remaining"] = "0"
            return headers, reset_after
        self.windows[key] = (start, used + 1)
        headers["X-RateLimit-Remaining"] = str(self.limit - used - 1)
        return headers, None


def json_response(
    data: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=json.dumps(data).encode(),
        status=status,
        headers={"Content-Type": "application/json", **(headers or {})},
    )


Handler = Callable[[web.Request, dict[str, str], dict[str, Any]], Awaitable[web.Response]]


class RestApi:
    def __init__(self, world: World, gateway: Gateway) -> None:
        self.world = world
        self.gateway = gateway
        self.calls: list[RestCall] = []
        self.faults: list[Fault] = []
        self.rate_limits: list[RateLimit] = []
        self.discord_limits: DiscordRateLimits | None = None  # Discord's documented limits
        # (time, channel id, message id, content) of each bot message posted or edited,
        # when a benchmark asks for it (``FakeDiscord.record_contents``).
        self.content_log: list[tuple[float, int, int, str]] | None = None
        # Seconds an interaction's callback takes to be answered (a slow Discord): for tests
        # of what is still on its way when the bot shuts down.
        self.callback_delay_s = 0.0
        self._nonces: dict[tuple[int, str], int] = {}
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        route = self._add
        route("GET", r"/users/@me", self.get_me)
        route("GET", r"/oauth2/applications/@me", self.get_application)
        route("GET", r"/gateway(/bot)?", self.get_gateway)
        route(
            "PUT", r"/applications/(?P<app>\d+)/guilds/(?P<guild>\d+)/commands", self.put_commands
        )
        route("PUT", r"/applications/(?P<app>\d+)/commands", self.put_commands)
        route(
            "GET", r"/applications/(?P<app>\d+)/guilds/(?P<guild>\d+)/commands", self.get_commands
        )
        route("GET", r"/applications/(?P<app>\d+)/commands", self.get_commands)
        route("POST", r"/channels/(?P<channel>\d+)/messages", self.post_message)
        route("GET", r"/channels/(?P<channel>\d+)/messages", self.list_messages)
        route("GET", r"/guilds/(?P<guild>\d+)/members/(?P<user>\d+)", self.get_member)
        route("GET", r"/channels/(?P<channel>\d+)/messages/(?P<message>\d+)", self.get_message)
        route("PATCH", r"/channels/(?P<channel>\d+)/messages/(?P<message>\d+)", self.patch_message)
        route(
            "DELETE", r"/channels/(?P<channel>\d+)/messages/(?P<message>\d+)", self.delete_message
        )
        route("POST", r"/channels/(?P<channel>\d+)/typing", self.post_typing)
        route(
            "POST",
            r"/channels/(?P<channel>\d+)/messages/(?P<message>\d+)/threads",
            self.thread_from_message,
        )
        route("POST", r"/channels/(?P<channel>\d+)/threads", self.thread_in_channel)
        route("GET", r"/channels/(?P<channel>\d+)", self.get_channel)
        route("PATCH", r"/channels/(?P<channel>\d+)", self.patch_channel)
        route(
            "POST",
            r"/interactions/(?P<iid>\d+)/(?P<token>[^/]+)/callback",
            self.interaction_callback,
        )
        route("POST", r"/webhooks/(?P<app>\d+)/(?P<token>[^/]+)", self.post_followup)
        route(
            "GET",
            r"/webhooks/(?P<app>\d+)/(?P<token>[^/]+)/messages/(?P<message>[^/]+)",
            self.get_followup,
        )
        route(
            "PATCH",
            r"/webhooks/(?P<app>\d+)/(?P<token>[^/]+)/messages/(?P<message>[^/]+)",
            self.patch_followup,
        )
        route(
            "DELETE",
            r"/webhooks/(?P<app>\d+)/(?P<token>[^/]+)/messages/(?P<message>[^/]+)",
            self.delete_followup,
        )

    def _add(self, method: str, pattern: str, handler: Handler) -> None:
        self._routes.append((method, re.compile(pattern + "$"), handler))

    # --- dispatch, log, faults --------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["tail"]
        method = request.method
        fault = self._take_fault(method, path)
        limits = [r for r in self.rate_limits if r.matches(method, path)]
        headers: dict[str, str] = {}
        retry_after: float | None = None
        for limit in limits:
            headers, retry_after = limit.take(path, time.time())
            if retry_after is not None:
                break
        if fault is None and retry_after is None and self.discord_limits is not None:
            headers, retry_after = self.discord_limits.check(method, path, time.time())
        if fault is not None:
            response = self._fault_response(fault)
        elif retry_after is not None:
            is_global = headers.get("X-RateLimit-Global") == "true"
            response = self._fault_response(
                Fault(429, retry_after=retry_after), global_limit=is_global
            )
            response.headers.update(headers)
        else:
            response = await self._route(request, method, path)
            response.headers.update(headers)
        peer = request.transport.get_extra_info("peername") if request.transport else None
        port = int(peer[1]) if peer else 0
        self.calls.append(RestCall(time.time(), method, path, response.status, port))
        return response

    def _take_fault(self, method: str, path: str) -> Fault | None:
        for fault in self.faults:
            if fault.times <= 0 or not fault.matches(method, path):
                continue
            if fault.skip > 0:
                fault.skip -= 1
                continue
            fault.times -= 1
            return fault
        return None

    @staticmethod
    def _fault_response(fault: Fault, *, global_limit: bool = False) -> web.Response:
        if fault.status == 429:
            body = {
                "message": "You are being rate limited.",
                "retry_after": round(fault.retry_after, 3),
                "global": global_limit,
            }
            headers = {"Retry-After": str(fault.retry_after), "Via": "1.1 fake-discord"}
            return json_response(body, 429, headers)
        if fault.status == 401:
            return json_response({"message": "401: Unauthorized", "code": 0}, 401)
        if fault.status == 403:
            return json_response({"message": "Missing Permissions", "code": 50013}, 403)
        return json_response({"message": "Internal Server Error", "code": 0}, fault.status)

    async def _route(self, request: web.Request, method: str, path: str) -> web.Response:
        for route_method, pattern, handler in self._routes:
            match = pattern.match(path)
            if match and route_method == method:
                return await handler(request, match.groupdict(), await self._body(request))
        return json_response({"message": f"404: no route {method} {path}", "code": 0}, 404)

    @staticmethod
    async def _body(request: web.Request) -> dict[str, Any]:
        if not request.can_read_body:
            return {}
        if request.content_type.startswith("multipart/"):
            # Discord's uploads: ``payload_json`` plus one ``files[n]`` part per file, named
            # by ``attachments[].id`` in the payload. The parts ride along as "_files".
            form = await request.post()
            payload = form.get("payload_json")
            body: dict[str, Any] = json.loads(str(payload)) if payload else {}
            files = []
            for name, part in form.items():
                if name.startswith("files[") and isinstance(part, web.FileField):
                    files.append((part.filename, part.file.read(), part.content_type))
            if files:
                body["_files"] = files
            return body
        text = await request.text()
        return json.loads(text) if text else {}

    # --- identity and commands --------------------------------------------------------

    async def get_me(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        return json_response(self.world.bot.payload())

    async def get_application(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        bot = self.world.bot
        return json_response(
            {
                "id": str(self.world.application_id),
                "name": bot.name,
                "icon": None,
                "description": "",
                "rpc_origins": [],
                "bot_public": True,
                "bot_require_code_grant": False,
                "owner": bot.payload(),
                "summary": "",
                "verify_key": "0" * 64,
                "team": None,
                "flags": 0,
                "bot": bot.payload(),
            }
        )

    async def get_gateway(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        limit = {"total": 1000, "remaining": 1000, "reset_after": 0, "max_concurrency": 1}
        return json_response({"url": self.gateway.url, "shards": 1, "session_start_limit": limit})

    async def put_commands(
        self, request: web.Request, args: dict[str, str], body: Any
    ) -> web.Response:
        guild = int(args["guild"]) if args.get("guild") else None
        commands = []
        for definition in body or []:
            command = dict(definition)
            command.update(
                id=str(self.world.next_id()),
                application_id=str(self.world.application_id),
                version=str(self.world.next_id()),
            )
            if guild is not None:
                command["guild_id"] = str(guild)
            commands.append(command)
        self.world.commands[guild] = commands
        return json_response(commands)

    async def get_commands(
        self, request: web.Request, args: dict[str, str], body: Any
    ) -> web.Response:
        guild = int(args["guild"]) if args.get("guild") else None
        return json_response(self.world.commands.get(guild, []))

    # --- messages ---------------------------------------------------------------------

    def _channel_or_404(self, channel_id: str) -> web.Response | None:
        channel = self.world.channels.get(int(channel_id))
        if channel is None or channel.deleted:
            return json_response({"message": "Unknown Channel", "code": 10003}, 404)
        return None

    def _message_or_404(self, message_id: str) -> FakeMessage | web.Response:
        message = self.world.messages.get(int(message_id))
        if message is None or message.deleted:
            return json_response({"message": "Unknown Message", "code": 10008}, 404)
        return message

    async def post_message(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        if (missing := self._channel_or_404(args["channel"])) is not None:
            return missing
        channel_id = int(args["channel"])
        nonce = body.get("nonce")
        if nonce is not None:
            # Discord's enforce_nonce: the same nonce in a channel returns the first message.
            existing = self._nonces.get((channel_id, str(nonce)))
            if existing is not None:
                return json_response(self.world.messages[existing].payload(self.world))
        files = []
        for filename, data, content_type in body.get("_files") or ():
            if len(data) > UPLOAD_LIMIT_BYTES:
                return json_response({"message": "Request entity too large", "code": 40005}, 413)
            files.append(FakeAttachment(self.world.next_id(), filename, data, content_type))
        for attachment in files:
            self.world.attachments[attachment.id] = attachment
        message = self.world.add_message(
            channel_id,
            self.world.bot.id,
            body.get("content") or "",
            flags=int(body.get("flags") or 0),
            components=body.get("components") or [],
            nonce=str(nonce) if nonce is not None else None,
            attachments=files,
        )
        message.allowed_mentions = body.get("allowed_mentions")
        reference = body.get("message_reference") or {}
        if reference.get("message_id"):
            message.reply_to = int(reference["message_id"])
        if nonce is not None:
            self._nonces[(channel_id, str(nonce))] = message.id
        if self.content_log is not None:
            self.content_log.append((time.time(), channel_id, message.id, message.content))
        self.gateway.dispatch("MESSAGE_CREATE", message.gateway_payload(self.world))
        return json_response(message.payload(self.world))

    async def list_messages(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        """A page of the channel's history (``limit`` 1-100, default 50; ``after`` or
        ``before``), newest first, as Discord pages it."""
        if (missing := self._channel_or_404(args["channel"])) is not None:
            return missing
        query = request.query
        if "around" in query:
            return json_response({"message": "the fake does not page around", "code": 0}, 400)
        try:
            limit = int(query.get("limit", 50))
            after = int(query["after"]) if "after" in query else None
            before = int(query["before"]) if "before" in query else None
        except ValueError:
            return json_response({"message": "Invalid Form Body", "code": 50035}, 400)
        if not 1 <= limit <= 100:
            return json_response({"message": "Invalid Form Body", "code": 50035}, 400)
        page = self.world.history(int(args["channel"]), limit=limit, after=after, before=before)
        return json_response([m.payload(self.world) for m in page])

    async def get_member(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        user = self.world.users.get(int(args["user"]))
        if user is None or int(args["guild"]) not in self.world.guilds:
            return json_response({"message": "Unknown Member", "code": 10007}, 404)
        return json_response(user.member_payload(0))

    async def get_message(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        found = self._message_or_404(args["message"])
        return (
            found if isinstance(found, web.Response) else json_response(found.payload(self.world))
        )

    def _apply_edit(self, message: FakeMessage, body: dict[str, Any]) -> None:
        if "content" in body:
            message.content = body["content"] or ""
        if "allowed_mentions" in body:
            message.allowed_mentions = body["allowed_mentions"]
        if "components" in body:
            message.components = body["components"] or []
        if body.get("flags") is not None:
            message.flags = int(body["flags"]) | (message.flags & EPHEMERAL)
        message.edited_at = time.time()
        message.edits += 1
        if self.content_log is not None:
            entry = (message.edited_at, message.channel_id, message.id, message.content)
            self.content_log.append(entry)
        if not message.ephemeral:
            self.gateway.dispatch("MESSAGE_UPDATE", message.gateway_payload(self.world))

    async def patch_message(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        found = self._message_or_404(args["message"])
        if isinstance(found, web.Response):
            return found
        self._apply_edit(found, body)
        return json_response(found.payload(self.world))

    def _delete(self, message: FakeMessage) -> None:
        message.deleted = True
        self.gateway.dispatch(
            "MESSAGE_DELETE",
            {
                "id": str(message.id),
                "channel_id": str(message.channel_id),
                "guild_id": str(message.guild_id),
            },
        )

    async def delete_message(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        found = self._message_or_404(args["message"])
        if isinstance(found, web.Response):
            return found
        self._delete(found)
        return web.Response(status=204)

    async def post_typing(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        if (missing := self._channel_or_404(args["channel"])) is not None:
            return missing
        self.world.typing.setdefault(int(args["channel"]), []).append(time.time())
        return web.Response(status=204)

    # --- channels and threads ---------------------------------------------------------

    async def thread_from_message(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        parent = self.world.channels[int(args["channel"])]
        if "message" in args:
            self.world.messages[int(args["message"])].flags |= HAS_THREAD
        thread = self.world.add_channel(
            parent.guild_id,
            body.get("name") or "thread",
            parent_id=parent.id,
            owner_id=self.world.bot.id,
        )
        # Discord gives a thread started from a message the message's id; ours keeps its
        # own id, which discord.py does not depend on.
        data = thread.payload() | {"newly_created": True}
        self.gateway.dispatch("THREAD_CREATE", data)
        return json_response(thread.payload())

    async def thread_in_channel(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        return await self.thread_from_message(request, args, body)

    async def get_channel(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        if (missing := self._channel_or_404(args["channel"])) is not None:
            return missing
        return json_response(self.world.channels[int(args["channel"])].payload())

    async def patch_channel(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        if (missing := self._channel_or_404(args["channel"])) is not None:
            return missing
        channel = self.world.channels[int(args["channel"])]
        if "name" in body:
            channel.name = body["name"]
        if "archived" in body:
            channel.archived = bool(body["archived"])
        event = "THREAD_UPDATE" if channel.type == PUBLIC_THREAD else "CHANNEL_UPDATE"
        self.gateway.dispatch(event, channel.payload())
        return json_response(channel.payload())

    # --- interactions -----------------------------------------------------------------

    def _interaction(self, token: str) -> FakeInteraction | web.Response:
        interaction = self.world.interactions_by_token.get(token)
        if interaction is None:
            return json_response({"message": "Unknown interaction", "code": 10062}, 404)
        return interaction

    def _bot_message(
        self, interaction: FakeInteraction, data: dict[str, Any], *, ephemeral: bool
    ) -> FakeMessage:
        message = self.world.add_message(
            interaction.channel_id,
            self.world.bot.id,
            data.get("content") or "",
            flags=int(data.get("flags") or 0),
            components=data.get("components") or [],
        )
        message.ephemeral = ephemeral
        message.interaction_id = interaction.id
        message.webhook_id = self.world.application_id
        message.allowed_mentions = data.get("allowed_mentions")
        return message

    async def interaction_callback(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        found = self._interaction(args["token"])
        if isinstance(found, web.Response):
            return found
        interaction = found
        if self.callback_delay_s:
            await asyncio.sleep(self.callback_delay_s)
        if interaction.callbacks:
            # Discord answers an interaction once; a second callback is an error.
            return json_response(
                {"message": "Interaction has already been acknowledged.", "code": 40060}, 400
            )
        kind = int(body.get("type") or 0)
        data = body.get("data") or {}
        interaction.callbacks.append((kind, data))
        interaction.acknowledged_at = time.time()
        interaction.ephemeral = bool(int(data.get("flags") or 0) & EPHEMERAL)
        resource: dict[str, Any] = {"type": kind}
        if kind in (4, 5):  # a message, or "thinking..." to be filled by the first followup
            # Simplification: a pending "thinking..." message is left out of transcripts
            # until its first followup fills it (Discord shows a placeholder meanwhile).
            message = self._bot_message(
                interaction, data, ephemeral=interaction.ephemeral or kind == 5
            )
            interaction.original_message_id = message.id
            if kind == 4 and not message.ephemeral:
                self.gateway.dispatch("MESSAGE_CREATE", message.gateway_payload(self.world))
            resource["message"] = message.payload(self.world)
        elif kind == 7 and interaction.message_id is not None:  # update the clicked message
            self._apply_edit(self.world.messages[interaction.message_id], data)
            resource["message"] = self.world.messages[interaction.message_id].payload(self.world)
        callback = {
            "interaction": {
                "id": str(interaction.id),
                "type": interaction.type,
                "response_message_id": str(interaction.original_message_id or ""),
                "response_message_loading": kind == 5,
                "response_message_ephemeral": interaction.ephemeral,
            },
            "resource": resource,
        }
        return json_response(callback)

    async def post_followup(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        found = self._interaction(args["token"])
        if isinstance(found, web.Response):
            return found
        interaction = found
        ephemeral = bool(int(body.get("flags") or 0) & EPHEMERAL)
        original = self.world.messages.get(interaction.original_message_id or 0)
        deferred = bool(interaction.callbacks) and interaction.callbacks[0][0] == 5
        if (
            deferred
            and original is not None
            and not original.deleted
            and not interaction.followup_ids
        ):
            # As on Discord, the first followup after a deferral replaces the "thinking..."
            # message, which stays as ephemeral (or not) as the deferral made it: the
            # followup's own ephemeral flag is ignored.
            message = original
            message.content = body.get("content") or ""
            message.components = body.get("components") or []
            message.flags = int(body.get("flags") or 0) & ~EPHEMERAL
            message.ephemeral = interaction.ephemeral
            message.allowed_mentions = body.get("allowed_mentions")
        else:
            message = self._bot_message(interaction, body, ephemeral=ephemeral)
        interaction.followup_ids.append(message.id)
        interaction.followed_up_at.append(time.time())
        if not message.ephemeral:
            self.gateway.dispatch("MESSAGE_CREATE", message.gateway_payload(self.world))
        return json_response(message.payload(self.world))

    def _followup_message(self, args: dict[str, str]) -> FakeMessage | web.Response:
        found = self._interaction(args["token"])
        if isinstance(found, web.Response):
            return found
        message_id = args["message"]
        if message_id == "@original":
            message_id = str(found.original_message_id or 0)
        return self._message_or_404(message_id)

    async def get_followup(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        found = self._followup_message(args)
        return (
            found if isinstance(found, web.Response) else json_response(found.payload(self.world))
        )

    async def patch_followup(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        found = self._followup_message(args)
        if isinstance(found, web.Response):
            return found
        self._apply_edit(found, body)
        return json_response(found.payload(self.world))

    async def delete_followup(
        self, request: web.Request, args: dict[str, str], body: dict[str, Any]
    ) -> web.Response:
        found = self._followup_message(args)
        if isinstance(found, web.Response):
            return found
        self._delete(found)
        return web.Response(status=204)

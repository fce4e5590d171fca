"""The fake Discord gateway: the websocket a discord.py client identifies or resumes on.

It speaks the JSON (uncompressed text frame) dialect: HELLO on connect, HEARTBEAT_ACK for
every heartbeat, READY (with ``session_id`` and ``resume_gateway_url``) then one
GUILD_CREATE per guild after IDENTIFY, and on RESUME a replay of every dispatch the client
missed followed by RESUMED. Every dispatch of a session is kept in order with its sequence
number, so a disconnect loses nothing: a resumed connection's writer starts after the
client's last seen sequence.

Shards: an IDENTIFY carrying ``shard: [id, count]`` opens a session of that shard; its READY
lists, and its GUILD_CREATEs describe, only the guilds of that shard, and every later
dispatch about a guild goes to the session of the guild's shard, ``(guild_id >> 22) %
count``, as Discord routes them (a dispatch about no guild goes to shard 0). A client that
sends no ``shard`` is shard 0 of 1 and gets everything, as before. Several processes may
each hold some of the shards.

``invalidate_session`` is the other kind of outage: the session is gone (as when Discord
lets one expire), so the client's RESUME gets INVALID_SESSION and it IDENTIFYs afresh; what
was dispatched while it had no session is never delivered, as on Discord. With
``hold=True`` new connections wait for HELLO until ``release``, so a test can act while
the bot is offline.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from threadspindle.testkit.fake_discord.store import World

__all__ = ["Gateway", "GatewaySession"]

_log = logging.getLogger(__name__)

OP_DISPATCH = 0
OP_HEARTBEAT = 1
OP_IDENTIFY = 2
OP_RESUME = 6
OP_RECONNECT = 7
OP_INVALID_SESSION = 9
OP_HELLO = 10
OP_HEARTBEAT_ACK = 11


@dataclass
class GatewaySession:
    id: str
    intents: int
    shard: tuple[int, int] = (0, 1)  # [id, count] from its IDENTIFY
    frames: list[str] = field(default_factory=list)  # dispatch frames; index = seq - 1
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    socket: web.WebSocketResponse | None = None


class Gateway:
    """Holds the sessions and the live sockets; ``dispatch`` is how the world speaks."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.url = ""  # ws://127.0.0.1:PORT/gateway, set once the server listens
        self.sessions: dict[str, GatewaySession] = {}
        self.shards: dict[int, GatewaySession] = {}  # shard id -> its current session
        self.shard_count = 1  # as the clients identified
        self.identifies = 0
        self.resumes = 0
        self.invalid_sessions = 0  # RESUMEs refused: the session was gone
        self.heartbeats = 0
        self._open = asyncio.Event()  # cleared: connections wait for HELLO (an outage)
        self._open.set()

    # --- the world's side -------------------------------------------------------------

    @property
    def current(self) -> GatewaySession | None:
        """The session of shard 0 (the only one of an unsharded client)."""
        return self.shards.get(0)

    def shard_of(self, guild_id: int | None) -> int:
        """The shard a guild's events go to (Discord's formula); no guild: shard 0."""
        return 0 if guild_id is None else (guild_id >> 22) % self.shard_count

    def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send a dispatch to the current session of the shard of the guild it is about
        (kept for replay if that shard is offline)."""
        guild = data.get("guild_id") or (data.get("id") if event.startswith("GUILD_") else None)
        session = self.shards.get(self.shard_of(int(guild) if guild else None))
        if session is None:
            return
        self._append(session, event, data)

    def _append(self, session: GatewaySession, event: str, data: dict[str, Any]) -> None:
        seq = len(session.frames) + 1
        session.frames.append(json.dumps({"op": OP_DISPATCH, "t": event, "s": seq, "d": data}))
        session.changed.set()

    async def disconnect(self, code: int = 4000) -> None:
        """Drop the bot's sockets (every shard's) as a network fault would (a resumable
        close code)."""
        for session in list(self.shards.values()):
            if session.socket is not None:
                socket, session.socket = session.socket, None
                await socket.close(code=code)

    async def invalidate_session(self, *, hold: bool = False) -> None:
        """Forget the bot's session and drop its socket: it cannot RESUME. Dispatches
        until it IDENTIFYs again go nowhere. ``hold``: keep it offline until ``release``."""
        if hold:
            self._open.clear()
        sessions, self.shards = list(self.shards.values()), {}
        for session in sessions:
            self.sessions.pop(session.id, None)
            if session.socket is not None:
                socket, session.socket = session.socket, None
                await socket.close(code=4000)

    def release(self) -> None:
        """End an outage begun with ``invalidate_session(hold=True)``."""
        self._open.set()

    # --- the websocket ----------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        await self._open.wait()
        await socket.send_str(json.dumps({"op": OP_HELLO, "d": {"heartbeat_interval": 41250}}))
        writer: asyncio.Task[None] | None = None
        try:
            async for frame in socket:
                if frame.type != WSMsgType.TEXT:
                    break
                message = json.loads(frame.data)
                op, data = message.get("op"), message.get("d")
                if op == OP_HEARTBEAT:
                    self.heartbeats += 1
                    await socket.send_str(json.dumps({"op": OP_HEARTBEAT_ACK}))
                elif op == OP_IDENTIFY:
                    fresh = self._identify(data or {})
                    writer = self._attach(fresh, socket, after_seq=0)
                elif op == OP_RESUME:
                    session = self.sessions.get(str(data.get("session_id")))
                    if session is None:
                        self.invalid_sessions += 1
                        await socket.send_str(json.dumps({"op": OP_INVALID_SESSION, "d": False}))
                        continue
                    self.resumes += 1
                    self.shards[session.shard[0]] = session
                    # RESUMED goes after the replayed backlog, in sequence.
                    writer = self._attach(session, socket, after_seq=int(data.get("seq") or 0))
                    self._append(session, "RESUMED", {})
                # op 3 (presence), op 8 (member chunks) and the rest: nothing to do
        finally:
            if writer is not None:
                writer.cancel()
            for session in self.sessions.values():
                if session.socket is socket:
                    session.socket = None
        return socket

    def _identify(self, data: dict[str, Any]) -> GatewaySession:
        self.identifies += 1
        shard_id, count = (int(n) for n in data.get("shard") or (0, 1))
        session = GatewaySession(
            id=uuid.uuid4().hex, intents=int(data.get("intents") or 0), shard=(shard_id, count)
        )
        self.sessions[session.id] = session
        self.shard_count = count
        self.shards[shard_id] = session
        guilds = [g for g in self.world.guilds.values() if self.shard_of(g.id) == shard_id]
        bot = self.world.bot
        self._append(
            session,
            "READY",
            {
                "v": 10,
                "user": bot.payload(),
                "guilds": [{"id": str(g.id), "unavailable": True} for g in guilds],
                "session_id": session.id,
                "shard": [shard_id, count],
                "resume_gateway_url": self.url,
                "application": {"id": str(self.world.application_id), "flags": 0},
                "private_channels": [],
                "relationships": [],
            },
        )
        for guild in guilds:
            self._append(session, "GUILD_CREATE", self.world.guild_payload(guild))
        return session

    def _attach(
        self, session: GatewaySession, socket: web.WebSocketResponse, *, after_seq: int
    ) -> asyncio.Task[None]:
        session.socket = socket
        return asyncio.ensure_future(self._write(session, socket, after_seq))

    async def _write(
        self, session: GatewaySession, socket: web.WebSocketResponse, cursor: int
    ) -> None:
        """Send the session's dispatches from ``cursor`` on, in order, while attached."""
        try:
            while session.socket is socket and not socket.closed:
                while cursor < len(session.frames) and session.socket is socket:
                    await socket.send_str(session.frames[cursor])
                    cursor += 1
                session.changed.clear()
                if cursor < len(session.frames):
                    continue
                await session.changed.wait()
        except (ConnectionError, RuntimeError) as exc:  # the socket went away mid-send
            _log.debug("gateway writer stopped: %s", exc)

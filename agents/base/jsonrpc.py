"""The one request/response peer over a CLI's stdin/stdout, and the message types of its side.

``RpcPeer`` writes requests, notifications and answers, and matches responses to the requests
that wait for them by id; the adapter's reader hands it every ``RpcResponse`` its parser found
(``resolve``). It never reads: parsing stays in the (pure) parsers. When the process goes away
the adapter calls ``close`` and every waiter wakes with ``RpcClosed``, so no caller hangs on a
dead agent; a write that fails closes the peer the same way.

The wire form is a ``Framing``: ``JSON_RPC`` (JSON-RPC 2.0, ``codex app-server`` and
``gemini --acp``) or Claude Code's control protocol (``claude/launch.py``), which has the same
shape (requests with ids, answers to the CLI's requests) in other envelopes.

``read_message`` sorts one decoded JSON-RPC message into a response, a request or a
notification for the parsers; a message of the wrong shape raises ``MalformedInput``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from threadspindle.agents.base.fields import MalformedInput

__all__ = [
    "JSON_RPC",
    "METHOD_NOT_FOUND",
    "Framing",
    "JsonRpcFraming",
    "RpcClosed",
    "RpcError",
    "RpcId",
    "RpcNotification",
    "RpcPeer",
    "RpcRequest",
    "RpcResponse",
    "read_message",
]

RpcId = int | str
METHOD_NOT_FOUND = -32601


@dataclass(frozen=True, slots=True)
class RpcResponse:
    """An answer to one of our requests (``error`` set when it failed)."""

    id: RpcId
    result: Any = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RpcRequest:
    """A request from the CLI, answered by ``id``."""

    id: RpcId
    method: str
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RpcNotification:
    method: str
    params: dict[str, Any]


class RpcError(Exception):
    """The CLI answered a request with an error."""

    def __init__(self, method: str, error: Mapping[str, Any]) -> None:
        self.method = method
        self.code = error.get("code")
        self.message = str(error.get("message") or error)
        self.data = error.get("data")
        super().__init__(f"{method}: {self.message}")


class RpcClosed(Exception):
    """The connection ended (or a write failed) before the answer came."""


def _is_id(value: Any) -> bool:
    return isinstance(value, int | str) and not isinstance(value, bool)


def read_message(msg: Mapping[str, Any]) -> RpcResponse | RpcRequest | RpcNotification:
    """One decoded JSON-RPC message, sorted. ``MalformedInput``: neither a response (an id with
    a result or an error) nor a request/notification (a string method, object params)."""
    method = msg.get("method")
    rpc_id = msg.get("id")
    if rpc_id is not None and not _is_id(rpc_id):
        raise MalformedInput("bad id")
    if method is None:
        if rpc_id is None or ("result" not in msg and "error" not in msg):
            raise MalformedInput("neither a request nor a response")
        error = msg.get("error")
        if error is not None and not isinstance(error, dict):
            error = {"message": str(error)}
        return RpcResponse(rpc_id, msg.get("result"), error)
    if not isinstance(method, str):
        raise MalformedInput("method is not a string")
    params = msg.get("params")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise MalformedInput("params is not an object")
    if rpc_id is not None:
        return RpcRequest(rpc_id, method, params)
    return RpcNotification(method, params)


class Framing(Protocol):
    """How a request/response protocol puts each message on the wire."""

    def new_id(self, n: int) -> RpcId: ...

    def request(self, rpc_id: RpcId, method: str, params: Mapping[str, Any]) -> dict[str, Any]: ...

    def notification(self, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]: ...

    def result(self, rpc_id: RpcId, result: Any) -> dict[str, Any]: ...

    def error(self, rpc_id: RpcId, code: int, message: str) -> dict[str, Any]: ...


class JsonRpcFraming:
    """JSON-RPC 2.0."""

    def new_id(self, n: int) -> RpcId:
        return n

    def request(self, rpc_id: RpcId, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": dict(params)}

    def notification(self, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        return message

    def result(self, rpc_id: RpcId, result: Any) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": rpc_id, "result": result}

    def error(self, rpc_id: RpcId, code: int, message: str) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": code, "message": message}}


JSON_RPC = JsonRpcFraming()


class _Waiter:
    __slots__ = ("done", "response")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.response: RpcResponse | None = None


class RpcPeer:
    """Our side of one CLI connection (see the module docstring)."""

    def __init__(
        self,
        write_line: Callable[[str], Awaitable[None]],
        framing: Framing = JSON_RPC,
        *,
        name: str = "the agent",
    ) -> None:
        self._write_line = write_line
        self.framing = framing
        self.name = name
        self._ids = itertools.count(1)
        self._waiters: dict[RpcId, _Waiter] = {}
        self._closed: str | None = None

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def new_id(self) -> RpcId:
        """A fresh request id (for ``send_request(..., rpc_id=)`` when the caller must know
        it before the request is on its way)."""
        return self.framing.new_id(next(self._ids))

    async def send(self, message: Mapping[str, Any]) -> None:
        """Write one message as one line; ``RpcClosed`` (and the peer closed) if it cannot."""
        if self._closed is not None:
            raise RpcClosed(self._closed)
        try:
            await self._write_line(json.dumps(message, separators=(",", ":")))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self.close(f"cannot write to {self.name}: {exc!r}")
            raise RpcClosed(self._closed or "closed") from exc

    async def call(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> RpcResponse:
        """Send a request and wait for its response, error or not. ``RpcClosed`` when the
        connection ends first, ``trio.TooSlowError`` after ``timeout`` seconds."""
        rpc_id = self.new_id()
        waiter = _Waiter()
        self._waiters[rpc_id] = waiter
        try:
            await self.send(self.framing.request(rpc_id, method, params or {}))
            with trio.fail_after(timeout) if timeout is not None else contextlib.nullcontext():
                await waiter.done.wait()
        finally:
            self._waiters.pop(rpc_id, None)
        if waiter.response is None:
            raise RpcClosed(self._closed or "closed")
        return waiter.response

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> Any:
        """``call``, returning the result; an error answer raises ``RpcError``."""
        response = await self.call(method, params, timeout=timeout)
        if response.error is not None:
            raise RpcError(method, response.error)
        return response.result

    async def send_request(
        self, method: str, params: Mapping[str, Any] | None = None, *, rpc_id: RpcId | None = None
    ) -> RpcId:
        """Send a request nobody waits on here (its answer comes to the parser as an event,
        or does not matter); returns its id."""
        rpc_id = self.new_id() if rpc_id is None else rpc_id
        await self.send(self.framing.request(rpc_id, method, params or {}))
        return rpc_id

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        await self.send(self.framing.notification(method, params))

    async def respond(self, rpc_id: RpcId, result: Any) -> None:
        await self.send(self.framing.result(rpc_id, result))

    async def respond_error(self, rpc_id: RpcId, code: int, message: str) -> None:
        await self.send(self.framing.error(rpc_id, code, message))

    def resolve(self, response: RpcResponse) -> bool:
        """Hand a response to its waiter; False when nobody waits for that id."""
        waiter = self._waiters.get(response.id)
        if waiter is None:
            return False
        waiter.response = response
        waiter.done.set()
        return True

    def close(self, reason: str) -> None:
        """Wake every waiter with ``RpcClosed``; later sends fail at once."""
        if self._closed is None:
            self._closed = reason
        for waiter in self._waiters.values():
            waiter.done.set()

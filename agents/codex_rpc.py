"""The client half of ``codex app-server``'s JSON-RPC over stdio: requests that wait for their
response, notifications, and answers to the server's own requests.

It only writes lines and matches responses by id; the adapter's reader feeds it each
``RpcResponse`` the parser found. When the process goes away every waiter is woken with
``RpcClosed``, so no caller hangs on a dead agent.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from threadspindle.agents.codex_parser import RpcResponse

__all__ = ["RpcClosed", "RpcError", "RpcPeer"]


class RpcError(Exception):
    """The server answered a request with a JSON-RPC error."""

    def __init__(self, method: str, error: dict[str, Any]) -> None:
        self.method = method
        self.code = error.get("code")
        self.message = str(error.get("message") or error)
        super().__init__(f"{method}: {self.message}")


class RpcClosed(Exception):
    """The connection ended (or failed) before the response came."""


class _Waiter:
    __slots__ = ("done", "method", "response")

    def __init__(self, method: str) -> None:
        self.method = method
        self.done = trio.Event()
        self.response: RpcResponse | None = None


class RpcPeer:
    def __init__(self, write_line: Callable[[str], Awaitable[None]]) -> None:
        self._write_line = write_line
        self._ids = itertools.count(1)
        self._waiters: dict[int | str, _Waiter] = {}
        self._closed: str | None = None

    @property
    def closed(self) -> bool:
        return self._closed is not None

    async def _send(self, message: dict[str, Any]) -> None:
        if self._closed is not None:
            raise RpcClosed(self._closed)
        try:
            await self._write_line(json.dumps(message, separators=(",", ":")))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self.close(f"cannot write to codex: {exc!r}")
            raise RpcClosed(self._closed or "closed") from exc

    async def request(self, method: str, params: dict[str, Any], timeout: float = 30.0) -> Any:
        """Send a request and wait for its result; ``RpcError`` for an error answer,
        ``RpcClosed`` when the process ends first, ``trio.TooSlowError`` after ``timeout``."""
        rpc_id = next(self._ids)
        waiter = _Waiter(method)
        self._waiters[rpc_id] = waiter
        try:
            await self._send({"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params})
            with trio.fail_after(timeout):
                await waiter.done.wait()
        finally:
            self._waiters.pop(rpc_id, None)
        if waiter.response is None:
            raise RpcClosed(self._closed or "closed")
        if waiter.response.error is not None:
            raise RpcError(method, waiter.response.error)
        return waiter.response.result

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._send(message)

    async def respond(self, rpc_id: int | str, result: Any) -> None:
        await self._send({"jsonrpc": "2.0", "id": rpc_id, "result": result})

    async def respond_error(self, rpc_id: int | str, code: int, message: str) -> None:
        await self._send(
            {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": code, "message": message}}
        )

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

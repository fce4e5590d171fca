"""``FakeDiscordApart``: the fake Discord in a process of its own, behind the same test API.

``FakeDiscord`` serves from a thread of the test's own process, which is what most tests
want (cheap, and it sees what the test does at once). A bench that loads the bot to its
limits wants the server elsewhere, as Discord is: in the bot's process the fake's request
handling takes the interpreter's lock from the bot (a sixth of the process's CPU at 200
streaming threads), and every answer waits for the bot's turn to let go of it.

Run as ``python -m threadspindle.testkit.fake_discord.apart SOCKET`` (``FakeDiscordApart``
does it): the child starts a ``FakeDiscord`` and serves its methods through a
``multiprocessing`` manager on the Unix socket ``SOCKET``, with the authentication key it
reads from stdin. ``FakeDiscordApart`` forwards every method call there; the return values
come back pickled (copies, as ``FakeDiscord``'s reading methods return anyway).
``rest_base``, ``gateway_url`` and ``bot_user_id`` are read once, at start.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from multiprocessing.managers import BaseManager
from typing import Any

from threadspindle.testkit.fake_discord.server import FakeDiscord

__all__ = ["FakeDiscordApart"]

_START_TIMEOUT_S = 30.0


class _Served:
    """The child's side: one started ``FakeDiscord``."""

    def __init__(self) -> None:
        self.fake = FakeDiscord().start()

    def where(self) -> tuple[str, str, int]:
        return self.fake.rest_base, self.fake.gateway_url, self.fake.bot_user_id

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.fake, name)(*args, **kwargs)

    def stop(self) -> None:
        self.fake.stop()


class _Manager(BaseManager):
    pass


_Manager.register("Served", _Served)


class FakeDiscordApart:
    """``with FakeDiscordApart() as fake:`` as ``with FakeDiscord() as fake:``; every
    method runs in the server's process."""

    rest_base: str
    gateway_url: str
    bot_user_id: int

    def __init__(self) -> None:
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._served: Any = None

    def __enter__(self) -> FakeDiscordApart:
        self._dir = tempfile.TemporaryDirectory(prefix="fake-discord-")
        address = os.path.join(self._dir.name, "manager.sock")
        key = os.urandom(32)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "threadspindle.testkit.fake_discord.apart", address],
            stdin=subprocess.PIPE,
        )
        assert self._process.stdin is not None
        self._process.stdin.write(key.hex().encode() + b"\n")
        self._process.stdin.close()
        try:
            manager = _Manager(address=address, authkey=key)
            deadline = time.monotonic() + _START_TIMEOUT_S
            while True:
                try:
                    manager.connect()
                    break
                except (FileNotFoundError, ConnectionRefusedError):
                    if self._process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("the fake Discord's process did not start") from None
                    time.sleep(0.05)
            self._served = manager.Served()  # type: ignore[attr-defined]
            self.rest_base, self.gateway_url, self.bot_user_id = self._served.where()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._served is not None:
                self._served.stop()
        finally:
            self._served = None
            if self._process is not None:
                self._process.terminate()
                self._process.wait(timeout=10)
                self._process = None
            if self._dir is not None:
                self._dir.cleanup()
                self._dir = None

    def __getattr__(self, name: str) -> Callable[..., Any]:
        served = self.__dict__.get("_served")
        if name.startswith("_") or served is None:
            raise AttributeError(name)
        return lambda *args, **kwargs: served.call(name, args, kwargs)


def _serve(address: str) -> None:
    key = bytes.fromhex(sys.stdin.readline().strip())
    manager = _Manager(address=address, authkey=key)
    manager.get_server().serve_forever()


if __name__ == "__main__":
    _serve(sys.argv[1])

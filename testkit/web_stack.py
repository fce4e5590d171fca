"""The whole web chat for end-to-end tests: ``run_platforms`` with the web chat only, the
live runtime on a real SQLite log, the scripted fake agent
(``testkit.fake_discord.stack.SCRIPT``), and a logged-in HTTP client playing the browser.

``WebStack.request`` queues a request that a background task sends in order (the contract
driver's calls are synchronous, and the server runs on this same trio loop), the way a
user's clicks reach the server one after the other. ``FlakyWebPlatform`` is the web
platform with failures injected into its next sends (a 429 with a retry-after, or a 5xx),
as the fakes of the other platforms inject them into their APIs.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio

from threadspindle.effects.platform import PlatformError, SelectMenu
from threadspindle.effects.web_platform import WebMessage, WebPlatform
from threadspindle.ingress.platforms import PlatformsApp, run_platforms
from threadspindle.ingress.web.security import own_path
from threadspindle.ingress.web.settings import WebSettings
from threadspindle.runtime.core.effect_types import Button
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.live.log import EventLog
from threadspindle.testkit.fake_agent import FakeAgentWorld
from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_discord.stack import FOOTER, SCRIPT

__all__ = ["FlakyWebPlatform", "WebStack", "web_stack"]

TOKEN = "web-stack-token"


class FlakyWebPlatform(WebPlatform):
    """``WebPlatform`` whose next sends fail as a platform's API would."""

    def __init__(self) -> None:
        super().__init__()
        self._failures: list[int] = []
        self.failed = 0

    def fail_next_sends(self, status: int, times: int) -> None:
        self._failures += [status] * times

    async def send(
        self,
        channel_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] = (),
        menu: SelectMenu | None = None,
        nonce: str | None = None,
    ) -> str:
        if self._failures:
            status = self._failures.pop(0)
            self.failed += 1
            await trio.lowlevel.checkpoint()
            if status == 429:
                raise PlatformError("injected 429", retry_after=0.3)
            raise PlatformError(f"injected {status}", retryable=status >= 500)
        return await super().send(channel_id, text, buttons=buttons, menu=menu, nonce=nonce)


@dataclass
class WebStack:
    app: PlatformsApp
    agents: FakeAgentWorld
    platform: FlakyWebPlatform
    client: httpx.AsyncClient
    workdir: str
    _send: trio.MemorySendChannel[tuple[str, str, dict[str, Any], bool]]
    statuses: list[int] = field(default_factory=list)  # of the queued requests, in order

    @property
    def runtime(self) -> Any:
        return self.app.runtime

    @property
    def url(self) -> str:
        """The server's origin (what ``Origin`` names)."""
        assert self.app.web is not None
        return self.app.web.url

    @property
    def base(self) -> str:
        """The path the chat's pages are under (``security.own_path``)."""
        return own_path(TOKEN)

    @property
    def pages(self) -> str:
        """Where the chat's pages are (``client`` and a stranger's requests go below it)."""
        return self.url + self.base

    def request(self, method: str, path: str, body: dict[str, Any], *, cookie: bool = True) -> None:
        """Send a request after those queued before it (``cookie=False``: a stranger)."""
        self._send.send_nowait((method, path, body, cookie))

    async def start(self, agent: str = "claude") -> str:
        """A new web thread with a conversation; its id once the conversation is on."""
        answer = await self.client.post(
            "/threads",
            data={"agent": agent, "workdir": self.workdir},
            headers={"origin": self.url},
        )
        assert answer.status_code == 303, answer.text
        thread_id = answer.headers["location"].rpartition("/t/")[2]
        await wait_for(
            lambda: self.runtime.snapshot(thread_id),
            lambda s: s is not None and s.conversation is not None,
        )
        # ... and the thread shows it ("Started claude in ..."): what a test reads next is
        # not racing the renderer's first paced send.
        await wait_for(lambda: self.bot_messages(thread_id))
        return thread_id

    def bot_messages(self, thread_id: str) -> list[WebMessage]:
        return [m for m in self.platform.view(thread_id).messages() if m.kind != "user"]

    async def until_footers(self, thread_id: str, count: int, timeout: float = 15.0) -> None:
        await wait_for(
            lambda: self.bot_messages(thread_id),
            lambda ms: sum(bool(FOOTER.match(m.text)) for m in ms) >= count,
            timeout,
        )
        await self.runtime.wait_quiet(thread_id)
        renderers = self.app.router.renderers["web"]
        await wait_for(
            lambda: [r.statistics().dirty_messages for r in renderers.renderers.values()],
            lambda dirty: not any(dirty),
            timeout,
        )


async def _sender(
    stack_client: httpx.AsyncClient,
    url: str,
    receive: trio.MemoryReceiveChannel[tuple[str, str, dict[str, Any], bool]],
    statuses: list[int],
) -> None:
    async with httpx.AsyncClient(base_url=url + own_path(TOKEN)) as stranger:
        async for method, path, body, cookie in receive:
            client = stack_client if cookie else stranger
            answer = await client.request(method, path, json=body, headers={"origin": url})
            statuses.append(answer.status_code)


@asynccontextmanager
async def web_stack(tmp_path: Path, *, queue_limit: int = 50) -> AsyncIterator[WebStack]:
    """The production wiring with the web chat only and the fake agent, on a log in
    ``tmp_path`` (the same path again: a restart)."""
    agents = FakeAgentWorld(script=SCRIPT)
    workdir = os.path.realpath(tmp_path)
    policy = Policy(allowed_roots=(workdir,), queue_limit=queue_limit)
    settings = WebSettings(
        token=TOKEN,
        port=0,
        agents=("claude", "codex", "echo"),
        default_agent="claude",
        default_workdir=workdir,
        allowed_roots=(workdir,),
    )
    platform = FlakyWebPlatform()
    with EventLog(tmp_path / "events.sqlite3") as log:
        async with trio.open_nursery() as nursery:
            app: PlatformsApp = await nursery.start(
                partial(
                    run_platforms,
                    web=settings,
                    web_platform=platform,
                    log=log,
                    adapter_factory=agents.factory,
                    policy=policy,
                    tick_interval_s=0.25,
                )
            )
            assert app.web is not None
            send, receive = trio.open_memory_channel[tuple[str, str, dict[str, Any], bool]](1000)
            try:
                # Below the chat's own path, where the printed URL leads (and its cookie).
                async with httpx.AsyncClient(base_url=app.web.url + own_path(TOKEN)) as client:
                    await client.get(f"/?token={TOKEN}")
                    stack = WebStack(app, agents, platform, client, workdir, send)
                    async with trio.open_nursery() as senders:
                        senders.start_soon(_sender, client, app.web.url, receive, stack.statuses)
                        try:
                            yield stack
                        finally:
                            senders.cancel_scope.cancel()
            finally:
                app.stop()

"""The whole WhatsApp connection against ``FakeWhatsApp``, for end-to-end tests: the webhook
under hypercorn, the Graph API client, the live runtime on a real SQLite log, the stream
renderer over ``WhatsAppPlatform``, and the scripted fake agent
(``testkit.fake_discord.stack.SCRIPT``).

``whatsapp_world`` makes the users: ``ALLOWED`` allow-listed wa_ids (a WhatsApp thread is
one chat, so each new conversation of a test is another user's chat) and mallory (not).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import trio

from threadspindle.effects.whatsapp_platform import parse_thread_id, whatsapp_thread_id
from threadspindle.ingress.platforms import PlatformsApp, run_platforms
from threadspindle.ingress.whatsapp.settings import SEEN_FILE, WhatsAppSettings
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.live.log import EventLog
from threadspindle.testkit.fake_agent import FakeAgentWorld, Step
from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_discord.stack import FOOTER, SCRIPT
from threadspindle.testkit.fake_whatsapp.server import (
    APP_SECRET,
    VERIFY_TOKEN,
    FakeWhatsApp,
    WaMessage,
)

__all__ = ["ALLOWED", "WhatsAppStack", "WhatsAppWorld", "whatsapp_stack", "whatsapp_world"]

ALLOWED = 12  # allow-listed users, one chat (thread) each


def is_footer(message: WaMessage) -> bool:
    return bool(FOOTER.match(message.text))


@dataclass
class WhatsAppWorld:
    fake: FakeWhatsApp
    users: list[str]  # allow-listed wa_ids
    mallory: str
    workdir: str
    next_user: int = 0
    started: list[str] = field(default_factory=list)  # threads with a conversation

    def settings(self, **overrides: Any) -> WhatsAppSettings:
        values: dict[str, Any] = {
            "token": self.fake.token,
            "app_secret": APP_SECRET,
            "verify_token": VERIFY_TOKEN,
            "phone_number_id": self.fake.phone_id,
            "base_url": self.fake.base_url,
            "webhook_port": 0,
            "allowed_wa_ids": tuple(self.users),
            "default_workdir": self.workdir,
            "min_message_interval_s": 0.3,
            "throttle_wait_s": 0.3,
        }
        values.update(overrides)
        return WhatsAppSettings.model_validate(values)

    def chat(self, thread_id: str) -> str:
        return parse_thread_id(thread_id)[0]

    def bot_messages(self, thread_id: str) -> list[WaMessage]:
        return self.fake.bot_messages(self.chat(thread_id))

    def fresh_user(self) -> str:
        user = self.users[self.next_user]
        self.next_user += 1
        return user


@contextmanager
def whatsapp_world(tmp_path: Path) -> Iterator[WhatsAppWorld]:
    with FakeWhatsApp(retry_every_s=0.1) as fake:
        users = [fake.add_user(f"1555000{n:04d}", f"user{n}") for n in range(ALLOWED)]
        mallory = fake.add_user("15559990000", "mallory")
        yield WhatsAppWorld(fake=fake, users=users, mallory=mallory, workdir=str(tmp_path))


@dataclass
class WhatsAppStack:
    world: WhatsAppWorld
    app: PlatformsApp
    agents: FakeAgentWorld

    @property
    def runtime(self) -> Any:
        return self.app.runtime

    async def start_chat(self, agent: str = "claude") -> str:
        """A fresh allowed user sends ``/<agent> start <workdir>``; their chat's thread id
        once its conversation is on and the start is answered."""
        user = self.world.fresh_user()
        thread_id = whatsapp_thread_id(user)
        self.world.fake.say(user, f"/{agent} start {self.world.workdir}")
        await wait_for(
            lambda: self.runtime.snapshot(thread_id),
            lambda s: s is not None and s.conversation is not None,
        )
        # And its answer shown ("Started claude in …"), so what a test reads next is new.
        await wait_for(lambda: self.world.bot_messages(thread_id))
        self.world.started.append(thread_id)
        return thread_id

    async def until_footers(
        self, thread_id: str, count: int, timeout: float = 15.0
    ) -> list[WaMessage]:
        await wait_for(
            lambda: self.world.bot_messages(thread_id),
            lambda ms: sum(map(is_footer, ms)) >= count,
            timeout,
        )
        await self.runtime.wait_quiet(thread_id)
        renderers = self.app.router.renderers["whatsapp"]
        await wait_for(
            lambda: [r.statistics().dirty_messages for r in renderers.renderers.values()],
            lambda dirty: not any(dirty),
            timeout,
        )
        return self.world.bot_messages(thread_id)


@asynccontextmanager
async def whatsapp_stack(
    world: WhatsAppWorld,
    tmp_path: Path,
    *,
    queue_limit: int = 50,
    script: Callable[[str], list[Step]] = SCRIPT,
    **settings: Any,
) -> AsyncIterator[WhatsAppStack]:
    """The production wiring (``run_platforms``) with WhatsApp only and the fake agent, on a
    log in ``tmp_path`` (the same path again: a restart). The fake delivers to the webhook
    once it listens, and to nobody after."""
    agents = FakeAgentWorld(script=script)
    policy = Policy(allowed_roots=(os.path.realpath(world.workdir),), queue_limit=queue_limit)
    # As in production (``whatsapp_settings_from_config``): the ids handled kept on disk.
    settings.setdefault("seen_path", str(tmp_path / SEEN_FILE))
    with EventLog(tmp_path / "events.sqlite3") as log:
        async with trio.open_nursery() as nursery:
            app: PlatformsApp = await nursery.start(
                partial(
                    run_platforms,
                    whatsapp=world.settings(**settings),
                    log=log,
                    adapter_factory=agents.factory,
                    policy=policy,
                    tick_interval_s=0.25,
                )
            )
            assert app.whatsapp is not None
            world.fake.webhook_url = app.whatsapp.webhook_url
            try:
                yield WhatsAppStack(world, app, agents)
            finally:
                world.fake.webhook_url = None
                app.stop()

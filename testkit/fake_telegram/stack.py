"""The whole Telegram bot against the fake Telegram, for end-to-end tests: the real
python-telegram-bot (hosted by trio-asyncio), the live runtime on a real SQLite log, the
stream renderer over ``TelegramPlatform``, and the in-process scripted fake agent
(``testkit.fake_discord.stack.SCRIPT`` says what each prompt word makes it do).

``telegram_world`` makes the chats: alice (allow-listed) with her private chat, mallory
(not), a forum group ``dev`` on the allow-list, and a project forum group whose General
topic opens a topic per message.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import trio

from threadspindle.effects.telegram_platform import parse_thread_id, telegram_thread_id
from threadspindle.ingress.platforms import PlatformsApp, run_platforms
from threadspindle.ingress.telegram.settings import ProjectGroup, TelegramSettings
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.live.log import EventLog
from threadspindle.testkit.fake_agent import FakeAgentWorld
from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_discord.stack import FOOTER, SCRIPT
from threadspindle.testkit.fake_telegram.server import FakeTelegram
from threadspindle.testkit.fake_telegram.world import TgMessage

__all__ = ["TelegramStack", "TelegramWorld", "is_footer", "telegram_stack", "telegram_world"]


def is_footer(message: TgMessage) -> bool:
    return bool(FOOTER.match(message.text))


@dataclass
class TelegramWorld:
    fake: FakeTelegram
    alice: int
    mallory: int
    group: int  # a forum group on the allow-list
    project: int  # a project forum group (agent codex, the workdir)
    workdir: str

    def settings(self, **overrides: Any) -> TelegramSettings:
        values: dict[str, Any] = {
            "token": self.fake.token,
            "base_url": self.fake.base_url,
            "allowed_user_ids": (self.alice,),
            "allowed_chat_ids": (self.group,),
            "project_groups": (
                ProjectGroup(chat_id=self.project, agent="codex", workdir=self.workdir),
            ),
            "default_workdir": self.workdir,
            "poll_timeout_s": 2.0,
            "min_edit_interval_s": 0.3,
        }
        values.update(overrides)
        return TelegramSettings.model_validate(values)

    def where(self, thread_id: str) -> tuple[int, int | None]:
        return parse_thread_id(thread_id)

    def say(self, thread_id: str, text: str, user: int | None = None) -> int:
        chat, topic = parse_thread_id(thread_id)
        return self.fake.send_message(chat, user or self.alice, text, topic=topic)

    def voice(self, thread_id: str, audio: bytes, user: int | None = None) -> int:
        chat, topic = parse_thread_id(thread_id)
        return self.fake.send_voice(chat, user or self.alice, audio, topic=topic)

    def messages(self, thread_id: str) -> list[TgMessage]:
        chat, topic = parse_thread_id(thread_id)
        return self.fake.messages(chat, topic)

    def bot_messages(self, thread_id: str) -> list[TgMessage]:
        chat, topic = parse_thread_id(thread_id)
        return self.fake.bot_messages(chat, topic)


@contextmanager
def telegram_world(tmp_path: Path) -> Iterator[TelegramWorld]:
    with FakeTelegram() as fake:
        alice = fake.add_user("alice")
        mallory = fake.add_user("mallory")
        fake.add_private_chat(alice)
        fake.add_private_chat(mallory)
        yield TelegramWorld(
            fake=fake,
            alice=alice,
            mallory=mallory,
            group=fake.add_group("dev"),
            project=fake.add_group("project"),
            workdir=str(tmp_path),
        )


@dataclass
class TelegramStack:
    world: TelegramWorld
    app: PlatformsApp
    agents: FakeAgentWorld

    @property
    def runtime(self) -> Any:
        return self.app.runtime

    async def start_topic(self, agent: str = "claude") -> str:
        """``/<agent> start <workdir>`` in the dev group's General topic as alice; the new
        topic's thread id once its conversation is on."""
        fake, group = self.world.fake, self.world.group
        before = set(fake.topics(group))
        fake.send_message(group, self.world.alice, f"/{agent} start {self.world.workdir}")
        topics = await wait_for(lambda: set(fake.topics(group)) - before)
        thread_id = telegram_thread_id(group, topics.pop())
        await wait_for(
            lambda: self.runtime.snapshot(thread_id),
            lambda s: s is not None and s.conversation is not None,
        )
        # And its answer shown, so what a test reads next is new (the stranger's check).
        await wait_for(
            lambda: [m for m in self.world.bot_messages(thread_id) if m.text.startswith("Started")]
        )
        return thread_id

    async def until_footers(
        self, thread_id: str, count: int, timeout: float = 15.0
    ) -> list[TgMessage]:
        await wait_for(
            lambda: self.world.messages(thread_id),
            lambda ms: sum(map(is_footer, ms)) >= count,
            timeout,
        )
        await self.runtime.wait_quiet(thread_id)
        renderers = self.app.router.renderers["telegram"]
        await wait_for(
            lambda: [r.statistics().dirty_messages for r in renderers.renderers.values()],
            lambda dirty: not any(dirty),
            timeout,
        )
        return self.world.messages(thread_id)


@asynccontextmanager
async def telegram_stack(
    world: TelegramWorld, tmp_path: Path, *, queue_limit: int = 50, **settings: Any
) -> AsyncIterator[TelegramStack]:
    """The production wiring (``run_platforms``) with Telegram only and the fake agent, on a
    log in ``tmp_path`` (the same path again: a restart)."""
    agents = FakeAgentWorld(script=SCRIPT)
    policy = Policy(allowed_roots=(os.path.realpath(world.workdir),), queue_limit=queue_limit)
    with EventLog(tmp_path / "events.sqlite3") as log:
        async with trio.open_nursery() as nursery:
            app: PlatformsApp = await nursery.start(
                partial(
                    run_platforms,
                    telegram=world.settings(**settings),
                    log=log,
                    adapter_factory=agents.factory,
                    policy=policy,
                    tick_interval_s=0.25,
                )
            )
            try:
                yield TelegramStack(world, app, agents)
            finally:
                app.stop()

"""The whole Slack app against the fake Slack, for end-to-end tests: the real slack-bolt and
slack-sdk (hosted by trio-asyncio, Socket Mode over aiohttp), the live runtime on a real
SQLite log, the stream renderer over ``SlackPlatform``, and the in-process scripted fake
agent (``testkit.fake_discord.stack.SCRIPT`` says what each prompt word makes it do).

``slack_world`` makes the workspace: alice (allow-listed), mallory (not), a channel ``dev``
on the allow-list, and a project channel whose top-level messages start threads.
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

from threadspindle.effects.slack_platform import parse_thread_id, slack_thread_id
from threadspindle.ingress.platforms import PlatformsApp, run_platforms
from threadspindle.ingress.slack.settings import ProjectChannel, SlackSettings
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.live.log import EventLog
from threadspindle.testkit.fake_agent import FakeAgentWorld
from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_discord.stack import FOOTER, SCRIPT
from threadspindle.testkit.fake_slack.server import FakeSlack
from threadspindle.testkit.fake_slack.world import BOT_USER, SlackMessage

__all__ = ["SlackStack", "SlackWorld", "is_footer", "slack_stack", "slack_world"]


def is_footer(message: SlackMessage) -> bool:
    return bool(FOOTER.match(message.shown))


@dataclass
class SlackWorld:
    fake: FakeSlack
    alice: str
    mallory: str
    dev: str  # a channel on the allow-list
    project: str  # a project channel (agent codex, the workdir)
    workdir: str

    def settings(self, **overrides: Any) -> SlackSettings:
        values: dict[str, Any] = {
            "bot_token": self.fake.bot_token,
            "app_token": self.fake.app_token,
            "base_url": self.fake.base_url,
            "allowed_user_ids": (self.alice,),
            "allowed_channel_ids": (self.dev,),
            "project_channels": (
                ProjectChannel(channel_id=self.project, agent="codex", workdir=self.workdir),
            ),
            "default_workdir": self.workdir,
            "min_edit_interval_s": 0.3,
        }
        values.update(overrides)
        return SlackSettings.model_validate(values)

    def where(self, thread_id: str) -> tuple[str, str]:
        return parse_thread_id(thread_id)

    def say(self, thread_id: str, text: str, user: str | None = None) -> str:
        channel, thread_ts = parse_thread_id(thread_id)
        return self.fake.send_message(channel, user or self.alice, text, thread_ts=thread_ts)

    def command(self, thread_id: str, words: str, user: str | None = None) -> str:
        """``@Spindle <words>`` in the thread (Slack runs no slash command in a thread)."""
        return self.say(thread_id, f"<@{BOT_USER}> {words}", user)

    def messages(self, thread_id: str) -> list[SlackMessage]:
        channel, thread_ts = parse_thread_id(thread_id)
        return self.fake.messages(channel, thread_ts)

    def bot_messages(self, thread_id: str) -> list[SlackMessage]:
        """The app's messages in the thread, its anchor (the parent) left out."""
        channel, thread_ts = parse_thread_id(thread_id)
        return [m for m in self.fake.bot_messages(channel, thread_ts) if m.ts != thread_ts]


@contextmanager
def slack_world(tmp_path: Path) -> Iterator[SlackWorld]:
    with FakeSlack() as fake:
        yield SlackWorld(
            fake=fake,
            alice=fake.add_user("alice"),
            mallory=fake.add_user("mallory"),
            dev=fake.add_channel("dev"),
            project=fake.add_channel("project"),
            workdir=str(tmp_path),
        )


@dataclass
class SlackStack:
    world: SlackWorld
    app: PlatformsApp
    agents: FakeAgentWorld

    @property
    def runtime(self) -> Any:
        return self.app.runtime

    async def start_thread(self, agent: str = "claude") -> str:
        """``/spindle <agent> start <workdir>`` in the dev channel as alice; the new
        thread's id once its conversation is on."""
        fake, dev = self.world.fake, self.world.dev
        before = {m.ts for m in fake.bot_messages(dev)}
        fake.slash(dev, self.world.alice, f"{agent} start {self.world.workdir}")
        anchors = await wait_for(lambda: [m for m in fake.bot_messages(dev) if m.ts not in before])
        thread_id = slack_thread_id(dev, anchors[0].ts)
        await wait_for(
            lambda: self.runtime.snapshot(thread_id),
            lambda s: s is not None and s.conversation is not None,
        )
        # The core's "Started …" answer is shown too: a test's "before" includes it.
        await wait_for(
            lambda: any("Started" in m.shown for m in self.world.bot_messages(thread_id))
        )
        return thread_id

    async def until_footers(
        self, thread_id: str, count: int, timeout: float = 15.0
    ) -> list[SlackMessage]:
        await wait_for(
            lambda: self.world.bot_messages(thread_id),
            lambda ms: sum(map(is_footer, ms)) >= count,
            timeout,
        )
        await self.runtime.wait_quiet(thread_id)
        renderers = self.app.router.renderers["slack"]
        await wait_for(
            lambda: [r.statistics().dirty_messages for r in renderers.renderers.values()],
            lambda dirty: not any(dirty),
            timeout,
        )
        return self.world.messages(thread_id)


@asynccontextmanager
async def slack_stack(
    world: SlackWorld, tmp_path: Path, *, queue_limit: int = 50, **settings: Any
) -> AsyncIterator[SlackStack]:
    """The production wiring (``run_platforms``) with Slack only and the fake agent, on a log
    in ``tmp_path`` (the same path again: a restart)."""
    agents = FakeAgentWorld(script=SCRIPT)
    policy = Policy(allowed_roots=(os.path.realpath(world.workdir),), queue_limit=queue_limit)
    with EventLog(tmp_path / "events.sqlite3") as log:
        async with trio.open_nursery() as nursery:
            app: PlatformsApp = await nursery.start(
                partial(
                    run_platforms,
                    slack=world.settings(**settings),
                    log=log,
                    adapter_factory=agents.factory,
                    policy=policy,
                    tick_interval_s=0.25,
                )
            )
            try:
                yield SlackStack(world, app, agents)
            finally:
                app.stop()

"""Shared pieces of the Discord tests (tests/ingress/discord, tests/effects): a started
fake Discord with a guild, channels and users;
a runtime sink that folds actions through the real pure transition; polling."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import TypeVar, cast

import trio

from threadspindle.effects.asyncio_loop import open_asyncio_loop
from threadspindle.ingress.discord.bot import SpindleBot
from threadspindle.ingress.discord.host import hosted_bot
from threadspindle.ingress.discord.settings import DiscordSettings, ProjectChannel
from threadspindle.runtime.core.actions import Action
from threadspindle.runtime.core.model import Policy, ThreadState
from threadspindle.runtime.core.transitions import transition
from threadspindle.testkit.fake_discord import FakeDiscord
from threadspindle.testkit.fake_discord.apart import FakeDiscordApart

T = TypeVar("T")


@dataclass
class World:
    fake: FakeDiscord
    guild: int
    channel: int
    project_channel: int
    alice: int  # allow-listed by user id
    bob: int  # allowed through the "agents" role
    mallory: int  # not allowed
    other_bot: int
    role: int
    workdir: str

    def settings(self, **overrides: object) -> DiscordSettings:
        values: dict[str, object] = {
            "token": "fake-token",
            "rest_base_url": self.fake.rest_base,
            "gateway_url": self.fake.gateway_url,
            "guild_ids": (self.guild,),
            "allowed_user_ids": (self.alice,),
            "allowed_role_ids": (self.role,),
            "project_channels": (
                ProjectChannel(
                    channel_id=self.project_channel, agent="codex", workdir=self.workdir
                ),
            ),
            "default_workdir": self.workdir,
            "guild_ready_timeout_s": 0.05,
        }
        values.update(overrides)
        return DiscordSettings.model_validate(values)


@contextmanager
def fake_world(tmp_path: object, *, apart: bool = False) -> Iterator[World]:
    """``apart``: the fake Discord serves from a process of its own (``FakeDiscordApart``,
    for the benches), not from a thread of this one."""
    # The apart fake forwards every method of FakeDiscord's test API: to its callers it is one.
    server = cast(FakeDiscord, FakeDiscordApart()) if apart else FakeDiscord()
    with server as fake:
        guild = fake.add_guild("spindle-test")
        role = fake.add_role(guild, "agents")
        workdir = str(tmp_path)
        yield World(
            fake=fake,
            guild=guild,
            channel=fake.add_channel(guild, "general"),
            project_channel=fake.add_channel(guild, "project"),
            alice=fake.add_user("alice"),
            bob=fake.add_user("bob", role_ids=(role,)),
            mallory=fake.add_user("mallory"),
            other_bot=fake.add_user("otherbot", bot=True),
            role=role,
            workdir=workdir,
        )


@dataclass
class SinkRuntime:
    """Stands in for the live runtime where only ingress is under test: it records every
    posted action and keeps each thread's state with the real pure transition."""

    actions: list[Action] = field(default_factory=list)
    states: dict[str, ThreadState] = field(default_factory=dict)
    disposed: list[str] = field(default_factory=list)
    policy: Policy = Policy(allowed_roots=("/",))

    async def post(self, action: Action, *, channel_id: str | None = None) -> None:
        self.actions.append(action)
        state = self.states.get(action.thread_id) or ThreadState.new(action.thread_id, self.policy)
        self.states[action.thread_id] = transition(state, action).state

    def snapshot(self, thread_id: str) -> ThreadState | None:
        return self.states.get(thread_id)

    async def dispose(self, thread_id: str) -> None:
        self.disposed.append(thread_id)
        self.states.pop(thread_id, None)

    def of_kind(self, kind: str) -> list[Action]:
        return [a for a in self.actions if a.kind == kind]


@asynccontextmanager
async def running_bot(
    world: World, runtime: object, **overrides: object
) -> AsyncIterator[SpindleBot]:
    async with open_asyncio_loop():
        async with hosted_bot(world.settings(**overrides), runtime) as bot:  # type: ignore[arg-type]
            yield bot


async def wait_for(
    read: Callable[[], T], done: Callable[[T], bool] = bool, timeout: float = 10.0
) -> T:
    """Poll ``read()`` until ``done`` holds; returns the last value (fails on timeout)."""
    with trio.fail_after(timeout):
        while True:
            value = read()
            if done(value):
                return value
            await trio.sleep(0.02)

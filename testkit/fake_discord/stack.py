"""The whole bot against the fake Discord, for end-to-end tests and benchmarks: the real
discord.py client (hosted by trio-asyncio), the live runtime on a real SQLite log, the
stream renderer over ``DiscordPlatform``, and the in-process scripted fake agent.

``SCRIPT`` is the fake agent's behaviour, chosen by a word in the prompt (in real time,
so every scenario is short):

- ``SLOW``: 10 text deltas 0.2 s apart (2 s: long enough to interrupt);
- ``BURST``: 60 deltas 0.05 s apart (20 deltas a second for 3 s);
- ``TOOLS``: three tool calls of 0.1 s each, text between them (``TOOLS WAITING``: 1 s);
- ``LONGTOOL``: a tool call that takes 30 s (to be aborted);
- ``LONG``: a ~6000-character answer with code blocks, in 12 deltas (``LONG STREAMED``:
  0.25 s apart);
- ``PERMISSION`` / ``QUESTION``: asks and waits (as ``testkit.fake_agent``);
- anything else: ``Hello from fake agent.`` in two deltas.
Every completed turn's footer carries ``$0.0010``.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import trio

from threadspindle.effects.platform import PlatformLimits
from threadspindle.effects.request_budget import DISCORD_BUDGET, BudgetLimits
from threadspindle.ingress.discord.bot import SpindleBot
from threadspindle.ingress.discord.host import DiscordApp, DiscordRenderers, run_discord_runtime
from threadspindle.runtime.core.agent_events import TextDelta, ToolFinished, ToolStarted
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.live.log import EventLog
from threadspindle.runtime.live.registry import Runtime
from threadspindle.testkit.fake_agent import FakeAgentWorld, Step, default_script
from threadspindle.testkit.fake_discord.harness import World, wait_for
from threadspindle.testkit.fake_discord.store import FakeMessage

__all__ = ["SCRIPT", "Stack", "discord_stack", "is_footer", "is_footer_text", "long_answer"]

FOOTER = re.compile(r"^\d+(\.\d)?s · \$0\.0010")


def is_footer_text(text: str) -> bool:
    """The footer the fake agent's runs end with (``2.1s · $0.0010 · …``)."""
    return bool(FOOTER.match(text))


def is_footer(message: FakeMessage) -> bool:
    return is_footer_text(message.content)


def shows_footer(message: FakeMessage) -> bool:
    """A footer of its own, or one that rode in the answer's last message (a ``-# `` line
    under it: the renderer does that when the request budget is short)."""
    content = message.content
    return is_footer_text(content) or is_footer_text(content.rpartition("\n-# ")[2])


def without_footer(content: str) -> str:
    """A message's text without a footer riding in it."""
    head, sep, tail = content.rpartition("\n-# ")
    return head if sep and is_footer_text(tail) else content


def _say(text: str) -> Step:
    return Step("event", TextDelta(text=text))


def _tool(n: int, command: str, seconds: float) -> list[Step]:
    return [
        Step(
            "event",
            ToolStarted(
                tool_id=f"tool{n}", name="Bash", display_name="Bash", input_summary=command
            ),
        ),
        Step("sleep", seconds=seconds),
        Step("event", ToolFinished(tool_id=f"tool{n}", result=f"ok {n}")),
    ]


def long_answer() -> str:
    """About 6000 characters of prose with three fenced code blocks."""
    prose = "The parser reads one line at a time and keeps what it cannot use. " * 6
    code = "\n".join(f"    value_{i} = compute({i})  # step {i}" for i in range(18))
    parts = []
    for n in range(3):
        parts.append(f"## Part {n + 1}\n\n{prose}\n\n```python\ndef part_{n}():\n{code}\n```\n\n")
    text = "".join(parts)
    while len(text) < 6000:
        text += prose + "\n"
    return text


def SCRIPT(prompt: str) -> list[Step]:  # noqa: N802 - a constant-like script table
    if "BURST" in prompt:
        steps: list[Step] = []
        for i in range(60):
            steps += [_say(f"b{i} "), Step("sleep", seconds=0.05)]
        return steps
    if "SLOW" in prompt:
        steps = []
        for i in range(10):
            steps += [_say(f"slow{i} "), Step("sleep", seconds=0.2)]
        return steps
    if "LONGTOOL" in prompt:
        return [_say("Starting a long tool. "), *_tool(1, "sleep 30", 30.0), _say("never")]
    if "TOOLS" in prompt:
        seconds = 1.0 if "WAITING" in prompt else 0.1
        return [
            _say("Three tools. "),
            *_tool(1, "ls", seconds),
            _say("Then grep. "),
            *_tool(2, "grep -r TODO", seconds),
            *_tool(3, "pytest -q", seconds),
            _say("All done."),
        ]
    if "LONG" in prompt:
        text = long_answer()
        size = len(text) // 12 + 1
        steps = [_say(text[i : i + size]) for i in range(0, len(text), size)]
        if "STREAMED" in prompt:  # as a model would: a piece every 0.25 s
            steps = [s for step in steps for s in (step, Step("sleep", seconds=0.25))]
        return steps
    return default_script(prompt)


@dataclass
class Stack:
    world: World
    runtime: Runtime
    bot: SpindleBot
    agents: FakeAgentWorld
    renderers: DiscordRenderers

    async def start_thread(self, agent: str = "claude") -> int:
        """``/<agent> start <workdir>`` in the channel as alice; the new thread's id, once
        its conversation is on."""
        fake = self.world.fake
        before = set(fake.threads(self.world.channel))
        fake.run_command(
            self.world.channel, self.world.alice, f"{agent} start", workdir=self.world.workdir
        )
        threads = await wait_for(
            lambda: set(fake.threads(self.world.channel)) - before, lambda t: len(t) == 1
        )
        thread = threads.pop()
        await wait_for(
            lambda: self.runtime.snapshot(str(thread)),
            lambda s: s is not None and s.conversation is not None,
        )
        return thread

    async def until_footers(
        self, thread: int, count: int, timeout: float = 15.0
    ) -> list[FakeMessage]:
        """Wait until the thread shows ``count`` footers and the runtime is quiet."""
        messages = await wait_for(
            lambda: self.world.fake.messages(thread),
            lambda ms: sum(map(is_footer, ms)) >= count,
            timeout,
        )
        await self.runtime.wait_quiet(str(thread))
        # The renderers' last paced edits (they make them in their own tasks, inside the
        # trio-asyncio loop; this task is outside it, so it only watches).
        await wait_for(
            lambda: [r.statistics().dirty_messages for r in self.renderers.renderers.values()],
            lambda dirty: not any(dirty),
            timeout,
        )
        return self.world.fake.messages(thread) if messages else messages


@asynccontextmanager
async def discord_stack(
    world: World,
    tmp_path: Path,
    *,
    limits: PlatformLimits | None = None,
    budget: BudgetLimits = DISCORD_BUDGET,
    agents: FakeAgentWorld | None = None,
    queue_limit: int = 50,
    **settings: Any,
) -> AsyncIterator[Stack]:
    """The production wiring (``run_discord_runtime``) with the fake agent, on a log in
    ``tmp_path`` (the same path again: a restart); ``limits`` for the renderers, ``budget``
    the request budget they share; ``agents`` instead of the fake agent with ``SCRIPT``."""
    agents = agents or FakeAgentWorld(script=SCRIPT)
    policy = Policy(allowed_roots=(os.path.realpath(world.workdir),), queue_limit=queue_limit)
    with EventLog(tmp_path / "events.sqlite3") as log:
        async with trio.open_nursery() as nursery:
            app: DiscordApp = await nursery.start(
                partial(
                    run_discord_runtime,
                    world.settings(**settings),
                    log=log,
                    adapter_factory=agents.factory,
                    policy=policy,
                    limits=limits,
                    budget=budget,
                    tick_interval_s=0.25,
                )
            )
            try:
                yield Stack(world, app.runtime, app.bot, agents, app.renderers)
            finally:
                app.stop()

"""The whole chain with the genuine Gemini CLI: chat actions -> the live runtime (actor,
pure transitions, reactor, listener) -> ``GeminiAdapter`` (``--acp``) -> the CLI -> the fake
Gemini API on 127.0.0.1 -> agent events -> chat outputs in a recording renderer."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import trio

from threadspindle.agents.base import AgentAdapter, AgentOptions
from threadspindle.agents.gemini import GeminiAdapter
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.effect_types import ShowPermissionPrompt, StartAgent
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.live.log import EventLog
from threadspindle.runtime.live.registry import Runtime, open_runtime
from threadspindle.testkit.fake_chat import RenderWorld
from threadspindle.testkit.fake_model.gemini import TEXT_ANSWER, FakeGeminiServer

GEMINI = Path(__file__).resolve().parents[3] / ".agents" / "node_modules" / ".bin" / "gemini"
THREAD = "thread-1"

pytestmark = pytest.mark.timeout(150)


class ChatUser:
    _ids = itertools.count(1)

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def _base(self) -> dict[str, Any]:
        return {"thread_id": THREAD, "action_id": f"g{next(self._ids)}", "at": trio.current_time()}

    async def send(self, action: A.Action) -> None:
        receipt = await self.runtime.post(action)
        await receipt.durable()

    async def start(self, workdir: Path) -> None:
        await self.send(
            A.ConversationStarted(
                **self._base(),
                agent="gemini",
                requested_workdir=str(workdir),
                resolved_workdir=str(workdir),
            )
        )

    async def say(self, text: str) -> None:
        await self.send(A.UserMessage(**self._base(), author_id="u1", text=text))

    async def answer(self, request_id: str, allow: bool) -> None:
        await self.send(A.PermissionAnswered(**self._base(), request_id=request_id, allow=allow))


async def until(predicate: Any, timeout: float = 45.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.05)


async def test_chat_through_the_runtime_to_the_genuine_gemini_cli(tmp_path: Path) -> None:
    assert GEMINI.exists(), "run `make agents` first"
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    )
    work = tmp_path / "work"
    work.mkdir()
    fake = FakeGeminiServer(slow_delay=0.25)
    fake.start()
    options = AgentOptions(
        binary=str(GEMINI),
        home=str(home),
        env=(
            ("GOOGLE_GEMINI_BASE_URL", fake.base_url),
            ("GEMINI_API_KEY", "fake-gemini-key"),
            ("TMPDIR", str(home)),
        ),
    )
    made: list[GeminiAdapter] = []

    def factory(start: StartAgent, thread_id: str) -> AgentAdapter:
        assert start.agent == "gemini"
        made.append(GeminiAdapter(options))
        return made[-1]

    world = RenderWorld()
    try:
        with EventLog(tmp_path / "events.sqlite3") as log:
            async with open_runtime(
                log=log,
                renderer_factory=world.renderer,
                adapter_factory=factory,
                policy=Policy(allowed_roots=(str(tmp_path),)),
                clock=trio.current_time,
            ) as runtime:
                chat = ChatUser(runtime)
                await chat.start(work)
                await chat.say("hello")
                await until(lambda: world.texts(THREAD, "footer"))
                assert TEXT_ANSWER in world.texts(THREAD, "text")
                assert any(
                    "Considering the greeting." in t for t in world.texts(THREAD, "thinking")
                )

                # A new message mid-stream interrupts the run (session/cancel) and becomes
                # the next prompt, in the same process.
                await chat.say("SLOWTEST")
                await until(lambda: any("chunk2" in t for t in world.texts(THREAD, "text")))
                await chat.say("TOOLTEST run echo hi")
                await until(lambda: len(world.texts(THREAD, "footer")) == 2)
                assert not any("chunk39" in t for t in world.texts(THREAD, "text"))
                assert any("echo hi" in t for t in world.texts(THREAD, "tool"))
                assert any("Output: hi" in t for t in world.texts(THREAD, "text"))

                # A permission prompt rendered in the thread, denied from a "click".
                await chat.say("TOUCHTEST")
                await until(
                    lambda: any(
                        isinstance(e, ShowPermissionPrompt) for e in world.of_thread(THREAD)
                    )
                )
                asked = next(
                    e for e in world.of_thread(THREAD) if isinstance(e, ShowPermissionPrompt)
                )
                await chat.answer(asked.request_id, allow=False)
                await until(lambda: len(world.texts(THREAD, "footer")) == 3)
                assert not (work / "touched.txt").exists()
                assert any("canceled by the user" in t for t in world.texts(THREAD, "text"))

                assert len(made) == 1  # one long-lived process served every turn
                assert not world.duplicate_keys
        assert made[0].stopped_clean is True
    finally:
        fake.stop()

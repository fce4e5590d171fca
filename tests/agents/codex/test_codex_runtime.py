"""The whole way through: chat actions -> the live runtime (actor, pure transitions, reactor,
listener) -> the Codex adapter -> the genuine ``codex app-server`` -> the fake Responses API,
and back to the (recording) chat. One thread: an answer with its footer, a permission
prompt answered from the chat, and a new message that interrupts a slow answer.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from threadspindle.agents.codex import CodexAdapter
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.effect_types import StartAgent
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.live.log import EventLog
from threadspindle.runtime.live.registry import open_runtime
from threadspindle.testkit.fake_chat import RenderWorld
from threadspindle.testkit.fake_model.openai_responses import HELLO, OpenAIResponsesFake
from threadspindle.testkit.genuine_clis import codex_options

pytestmark = pytest.mark.timeout(150)
THREAD = "t-codex"


async def _until(predicate: Callable[[], bool], timeout: float = 45.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


async def test_a_codex_thread_through_the_runtime(tmp_path: Path) -> None:
    fake = OpenAIResponsesFake(slow_delay=0.2, slow_chunks=40)
    fake.start()
    work = tmp_path / "work"
    work.mkdir()
    opts = codex_options(fake.base_url, tmp_path / "home")
    adapters: list[CodexAdapter] = []

    def factory(start: StartAgent, thread_id: str) -> CodexAdapter:
        assert start.agent == "codex"
        adapters.append(CodexAdapter(opts, approval_policy="untrusted"))
        return adapters[-1]

    ids = itertools.count(1)
    chat = RenderWorld()

    def base() -> dict[str, Any]:
        return {"thread_id": THREAD, "action_id": f"u{next(ids)}", "at": trio.current_time()}

    user = {"author_id": "u1", "author_name": "alice"}
    try:
        with EventLog(tmp_path / "events.sqlite3") as log:
            async with open_runtime(
                log=log,
                renderer_factory=chat.renderer,
                adapter_factory=factory,
                policy=Policy(allowed_roots=(str(tmp_path),)),
                clock=trio.current_time,
            ) as rt:

                async def send(action: A.Action) -> None:
                    await (await rt.post(action)).durable()

                def state() -> Any:
                    return rt.snapshot(THREAD)

                await send(
                    A.ConversationStarted(
                        **base(),
                        agent="codex",
                        requested_workdir=str(work),
                        resolved_workdir=str(work),
                    )
                )
                # 1. an answer, streamed, with its footer; the session id is stored
                await send(A.UserMessage(**base(), **user, text="hello", interrupt=True))
                await _until(lambda: state().counters.completed == 1)
                # the chat is written by the reactor after the commit: wait for it too
                await _until(lambda: any("gpt-5.5" in t for t in chat.texts(THREAD, "footer")))
                assert HELLO in chat.texts(THREAD, "text")
                session = state().conversation.session_id
                assert session is not None and session == adapters[0].session_id

                # 2. a permission prompt shown in the chat, answered yes from the chat
                await send(A.UserMessage(**base(), **user, text="TOUCHTEST", interrupt=True))
                await _until(lambda: len(state().blockers) == 1)
                blocker = state().blockers[0]
                assert blocker.kind == "permission" and "touch touched.txt" in blocker.text
                await send(
                    A.PermissionAnswered(**base(), request_id=blocker.request_id, allow=True)
                )
                await _until(lambda: state().counters.completed == 2)
                assert (work / "touched.txt").exists()

                # 3. a new message interrupts a slow answer and is answered next
                await send(A.UserMessage(**base(), **user, text="SLOWTEST", interrupt=True))
                await _until(lambda: any("chunk 2" in t for t in chat.texts(THREAD, "text")))
                await send(A.UserMessage(**base(), **user, text="hello again", interrupt=True))
                await _until(lambda: state().counters.completed == 3)
                await _until(lambda: len(chat.texts(THREAD, "footer")) == 3)
                st = state()
                assert st.counters.interrupts == 1 and st.run is None and st.queue == ()
                assert chat.texts(THREAD, "text").count(HELLO) == 2
                assert not any("chunk 39" in t for t in chat.texts(THREAD, "text"))
                assert len(adapters) == 1  # one codex process served the whole thread
                assert chat.duplicate_keys == []
    finally:
        fake.stop()

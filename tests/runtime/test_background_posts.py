"""Posts the real ``StreamRenderer`` makes outside ``apply`` become ``OutputPosted`` too.

Two ways a message reaches the chat without an effect being applied at that moment:

- the renderer's background task sends a stream's first message one pacing interval
  after it opened (the agent then says nothing for a while, so no later effect would
  carry the report);
- a failed ``apply`` sent earlier messages before the call that failed; those ids wait in
  the renderer, and the last flush at disposal must still report them.

The runtime is the real one (SQLite log, scripted fake agent), the renderer the real
``StreamRenderer`` over ``RecordingPlatform``; MockClock jumps over the waits.
"""

from __future__ import annotations

import pytest
import trio
from runtime_harness import Chat, running, until

from threadspindle.effects.platform import PlatformError
from threadspindle.effects.render import StreamRenderer
from threadspindle.runtime.core.agent_events import TextDelta
from threadspindle.runtime.core.effect_types import PostOutput, PromptAgent
from threadspindle.testkit.fake_agent import FakeAgentWorld, Step, default_script
from threadspindle.testkit.recording_platform import RecordingPlatform


@pytest.fixture
def autojump(autojump_clock: trio.testing.MockClock) -> trio.testing.MockClock:
    return autojump_clock


def says_then_works(text: str) -> list[Step]:
    """One line of text, then a long silence: nothing after the first delta to apply."""
    if "WORK" in text:
        return [Step("event", TextDelta(text="Working on it")), Step("sleep", seconds=10_000)]
    return default_script(text)


def posted_ids(rt, thread_id: str = "t1") -> set[str]:
    rt.log.flush()
    return {i for ids in rt.log.posted_outputs(thread_id).values() for i in ids}


def shown_ids(platform: RecordingPlatform, thread_id: str = "t1") -> set[str]:
    return {m.id for m in platform.messages(thread_id) if not m.reply_to}


async def test_a_paced_send_by_the_background_task_is_logged(tmp_path, autojump) -> None:
    platform = RecordingPlatform()
    agents = FakeAgentWorld(script=says_then_works)
    async with trio.open_nursery() as renderers:

        def renderer(thread_id: str) -> StreamRenderer:
            r = StreamRenderer(platform, thread_id)  # as app/app.py makes them
            renderers.start_soon(r.run)
            return r

        async with running(tmp_path, agents=agents, renderer_factory=renderer) as rt:
            chat = Chat(rt, "t1", str(tmp_path))
            await chat.start()
            await chat.say("please WORK")
            await until(lambda: any("Working on it" in t for t in platform.texts("t1")))
            stream = next(m for m in platform.messages("t1") if "Working on it" in m.text)
            # The run is still going and the agent silent: only the callback can report it.
            await until(lambda: stream.id in posted_ids(rt))
            assert rt.snapshot("t1").run is not None
            key = next(k for k, ids in rt.log.posted_outputs("t1").items() if stream.id in ids)
            assert key.startswith("t1/")
            assert rt.get("t1").reactor.statistics().failed == 0
            assert await rt.dispose("t1", "test disposal")
            # Every message the chat shows (replies aside, which carry their action id) is
            # in the log under exactly one key: a restarted renderer can edit each of them.
            posted = rt.log.posted_outputs("t1")
            assert shown_ids(platform) <= posted_ids(rt)
            all_ids = [i for ids in posted.values() for i in ids]
            assert len(all_ids) == len(set(all_ids))
        renderers.cancel_scope.cancel()


async def test_a_message_sent_before_a_failed_notice_is_logged(tmp_path, autojump) -> None:
    platform = RecordingPlatform()
    agents = FakeAgentWorld(script=says_then_works)

    # No background task: the stream's first message waits for the next apply, which is
    # the parking notice at disposal; that apply sends it first, then fails on its own send
    # (and every send after it), so its report must come from a later apply or the flush.
    async with running(
        tmp_path, agents=agents, renderer_factory=lambda t: StreamRenderer(platform, t)
    ) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        delivered = trio.Event()
        agents.on_prompt = lambda p: delivered.set() if isinstance(p, PromptAgent) else None
        await chat.say("please WORK")
        await delivered.wait()
        await until(lambda: rt.snapshot("t1").run is not None and rt.get("t1").is_quiet())
        await trio.sleep(1)  # the delta arrived, its message waits unsent
        assert not any("Working on it" in t for t in platform.texts("t1"))
        platform.inject(lambda: PlatformError("403 Missing Access"), nth=2, kind="send", times=99)
        assert await rt.dispose("t1", "test disposal")
        stream = next(m for m in platform.messages("t1") if "Working on it" in m.text)
        sends = [c for c in platform.calls if c.kind == "send"]
        assert sends[-2].text == stream.text and sends[-2].error is None
        assert sends[-1].error == "403 Missing Access"  # the parking notice
        failed = [
            e.action
            for e in rt.log.read("t1")
            if e.action.kind == "effect_failed" and e.action.effect == "post_output"
        ]
        assert len(failed) == 1  # the notice's failure was reported as such
        assert stream.id in posted_ids(rt)  # and the message sent before it is not lost


async def test_the_last_flush_at_disposal_is_logged(tmp_path, autojump) -> None:
    """A message still waiting for its paced send when an idle thread is disposed (no
    run: parking shows nothing, so no apply sends it) goes out in the disposal's flush,
    and its OutputPosted is committed before the actor ends."""
    platform = RecordingPlatform()
    made: dict[str, StreamRenderer] = {}

    def renderer(thread_id: str) -> StreamRenderer:
        made[thread_id] = StreamRenderer(platform, thread_id)  # no background task
        return made[thread_id]

    async with running(tmp_path, renderer_factory=renderer) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.say("hello")
        await until(lambda: rt.snapshot("t1").counters.completed == 1 and rt.get("t1").is_quiet())
        # A tool card is sent one pacing interval after it opens (or when its result
        # comes); handed to the renderer directly, it is the one thing left to send.
        await made["t1"].apply(PostOutput(key="t1/late-card", kind="tool", text="🔧 Bash(ls)"))
        assert not any("Bash(ls)" in t for t in platform.texts("t1"))
        assert await rt.dispose("t1", "idle")
        card = next(m for m in platform.messages("t1") if "Bash(ls)" in m.text)
        assert rt.log.posted_outputs("t1")["t1/late-card"] == (card.id,)

"""Chat effects applied by the log's flush itself (``Reactor._apply_now``): an append the
renderer takes without waiting (``apply_nowait``) goes to it as soon as it is durable, when
the chat lane holds and applies nothing, without waking the lane's task. Never ahead of an
effect committed before it: with the lane busy (a reply held by a 30 s "rate limit"), the
appends wait in the lane behind it, as before.

The runtime is the real one (SQLite log, scripted fake agent, MockClock)."""

from __future__ import annotations

import pytest
import trio
from runtime_harness import Chat, running, until

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.effect_types import AppendOutput, Effect, ReplyToCommand
from threadspindle.runtime.live.ports import Posted
from threadspindle.testkit.fake_chat import RecordingRenderer, RenderWorld

BLOCK_S = 30.0


@pytest.fixture
def autojump(autojump_clock: trio.testing.MockClock) -> trio.testing.MockClock:
    return autojump_clock


class AtOnceChat(RenderWorld):
    """A chat whose renderer takes appends without waiting (counted), and, once armed,
    holds every ``ReplyToCommand`` for 30 s."""

    def __init__(self, *, at_once: bool = True) -> None:
        super().__init__()
        self.at_once = at_once
        self.armed = False
        self.taken_at_once = 0
        self.reply_done_at: list[float] = []

    def renderer(self, thread_id: str) -> RecordingRenderer:
        world = self

        class AtOnce(RecordingRenderer):
            async def apply(self, effect: Effect) -> list[Posted]:
                if world.armed and isinstance(effect, ReplyToCommand):
                    await trio.sleep(BLOCK_S)
                    posted = await super().apply(effect)
                    world.reply_done_at.append(trio.current_time())
                    return posted
                return await super().apply(effect)

            def apply_nowait(self, effect: Effect) -> list[Posted] | None:
                if not world.at_once or type(effect) is not AppendOutput:
                    return None
                world.taken_at_once += 1
                # What ``apply`` records for an append, without its checkpoint.
                world.effects.append((self.thread_id, trio.current_time(), effect))
                if effect.key in world.outputs:
                    world.outputs[effect.key].text += effect.text
                return []

        return AtOnce(thread_id, self)


async def _slow_turn(tmp_path, chat_world: AtOnceChat) -> tuple[list[Effect], int, int]:
    async with running(tmp_path, chat=chat_world) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.say("SLOW please")  # 20 deltas, 0.5 s apart
        await until(lambda: rt.snapshot("t1").counters.completed == 1, step=0.05)
        await until(lambda: rt.get("t1").is_quiet())
        stats = rt.get("t1").reactor.statistics()
        return chat_world.of_thread("t1"), stats.applied_at_once, stats.applied


async def test_appends_are_applied_from_the_flush_and_the_chat_sees_the_same(
    tmp_path, autojump
) -> None:
    at_once = AtOnceChat()
    effects, applied_at_once, applied = await _slow_turn(tmp_path / "a", at_once)
    lane_only = AtOnceChat(at_once=False)
    effects_lane, applied_at_once_lane, _ = await _slow_turn(tmp_path / "b", lane_only)
    # Every delta of the slow stream came alone: each was an append taken at once.
    assert applied_at_once == at_once.taken_at_once >= 19
    assert applied_at_once_lane == 0 and lane_only.taken_at_once == 0
    assert applied >= applied_at_once
    # The same effects in the same order, and the same answer shown.
    assert [e.type for e in effects] == [e.type for e in effects_lane]
    texts = [o.text for o in at_once.outputs.values() if o.kind == "text"]
    assert texts == [o.text for o in lane_only.outputs.values() if o.kind == "text"]
    assert any("chunk0 chunk1" in t and t.rstrip().endswith("chunk19") for t in texts)


async def test_appends_wait_behind_an_effect_the_lane_is_still_applying(tmp_path, autojump) -> None:
    chat_world = AtOnceChat()
    async with running(tmp_path, chat=chat_world) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await until(lambda: rt.get("t1").is_quiet())
        chat_world.armed = True
        t0 = trio.current_time()
        await chat.send(A.StatusRequested(**chat._base()))  # its reply: held 30 s
        await chat.say("SLOW please")  # streams while the reply is held
        await until(lambda: rt.snapshot("t1").counters.completed == 1, step=0.05)
        assert trio.current_time() - t0 < BLOCK_S  # the turn ended while the reply waited
        await until(lambda: rt.get("t1").is_quiet())
        applied = [(at, e) for t, at, e in chat_world.effects if t == "t1"]
        assert chat_world.reply_done_at  # the /status reply, out after its 30 s
        reply_at = chat_world.reply_done_at[0]
        assert reply_at >= t0 + BLOCK_S
        appends = [(at, e) for at, e in applied if isinstance(e, AppendOutput)]
        # None went past the held reply: every append came after it, from the lane.
        assert appends and all(at >= reply_at for at, _ in appends)
        assert chat_world.taken_at_once == 0
        text = "".join(e.text for _, e in appends)
        # (The answer's first delta opened its output, a post: the appends are the rest.)
        assert text.startswith("chunk1 chunk2 ") and text.rstrip().endswith("chunk19")

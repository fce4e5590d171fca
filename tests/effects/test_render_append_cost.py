"""``StreamRenderer.apply`` of an append to a streaming message: no scheduler round and no
wake-up of the background task (the commonest effect of a busy bot; each cost a task step),
while the paced edit still goes out when it falls due, with all the text."""

from __future__ import annotations

import trio

from threadspindle.effects.render import StreamRenderer
from threadspindle.effects.request_budget import DISCORD_BUDGET, RequestBudget
from threadspindle.runtime.core.effect_types import AppendOutput, PostOutput, SealOutput
from threadspindle.testkit.recording_platform import RecordingPlatform


class Steps(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


async def test_an_append_takes_no_scheduler_round_and_the_paced_edit_shows_it_all(
    autojump_clock: object,
) -> None:
    platform = RecordingPlatform()
    async with trio.open_nursery() as nursery:
        budget = RequestBudget(DISCORD_BUDGET)
        await nursery.start(budget.run)
        async with StreamRenderer(platform, "c1", budget=budget) as renderer:
            await renderer.apply(PostOutput(key="k", kind="text", text=""))
            await renderer.apply(AppendOutput(key="k", seq=1, text="first "))
            await trio.sleep(1.0)  # its message is out
            sent = [c for c in platform.calls if c.kind == "send"]
            assert len(sent) == 1
            steps = Steps()
            trio.lowlevel.add_instrument(steps)
            try:
                for n in range(2, 200):
                    await renderer.apply(AppendOutput(key="k", seq=n, text=f"w{n} "))
            finally:
                trio.lowlevel.remove_instrument(steps)
            # Neither this task nor the background task ran a step of its own.
            assert steps.steps == 0
            await trio.sleep(1.0)  # the paced edit falls due
            shown = platform.messages("c1")[0].text
            assert shown.startswith("first w2 ") and shown.rstrip().endswith("w199")
        nursery.cancel_scope.cancel()


async def test_a_locked_renderer_still_waits_its_turn(autojump_clock: object) -> None:
    """While the background task holds the renderer (a slow edit), an append waits for it
    rather than slipping in: the lock is only skipped when it is free."""
    platform = RecordingPlatform(latency_s=0.5)
    async with StreamRenderer(platform, "c1") as renderer:
        await renderer.apply(PostOutput(key="k", kind="text", text=""))
        await renderer.apply(AppendOutput(key="k", seq=1, text="first "))
        await trio.sleep(0.6)  # the first message's send is under way (0.5 s)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(renderer.apply, AppendOutput(key="k", seq=2, text="second"))
            await trio.sleep(0)
        await renderer.flush()
        assert platform.messages("c1")[0].text == "first second"


async def _stream(platform: RecordingPlatform, *, nowait: bool) -> list[str]:
    """A 300-delta answer with lines, a link and a code block, through ``apply`` only or
    ``apply_nowait`` first; returns how often ``apply_nowait`` sent it to ``apply``."""
    words = [f"word{n:04d}" for n in range(300)]
    for n in range(0, 300, 17):
        words[n] += "\n"
    words[40] = "https://example.com/x"
    words[90:92] = ["\n```py\n", "code\n```\n"]
    refused: list[str] = []
    async with trio.open_nursery() as nursery:
        budget = RequestBudget(DISCORD_BUDGET)
        await nursery.start(budget.run)
        async with StreamRenderer(platform, "c1", budget=budget) as renderer:
            await renderer.apply(PostOutput(key="k", kind="text", text="start "))
            for seq, word in enumerate(words, start=1):
                effect = AppendOutput(key="k", seq=seq, text=word + " ")
                if nowait:
                    if renderer.apply_nowait(effect) is not None:
                        await trio.sleep(0.05)
                        continue
                    refused.append(word)
                await renderer.apply(effect)
                await trio.sleep(0.05)
            await renderer.apply(SealOutput(key="k"))
        nursery.cancel_scope.cancel()
    return refused


async def test_apply_nowait_shows_the_same_as_apply(autojump_clock: object) -> None:
    """The stream through ``apply_nowait`` (``apply`` where it refuses) ends as the same
    messages with the same texts; it took most appends itself, and sent to ``apply`` the
    first ones (no message posted yet) and those near a message's end."""
    by_apply, by_nowait = RecordingPlatform(), RecordingPlatform()
    assert await _stream(by_apply, nowait=False) == []
    refused = await _stream(by_nowait, nowait=True)
    assert [m.text for m in by_nowait.messages("c1")] == [m.text for m in by_apply.messages("c1")]
    assert len(by_apply.messages("c1")) >= 2  # the answer spans messages
    assert 0 < len(refused) < 100  # of 300 appends


async def test_apply_nowait_refuses_what_needs_apply(autojump_clock: object) -> None:
    platform = RecordingPlatform()
    idle = StreamRenderer(platform, "c1")  # no background task: edits only from apply
    await idle.apply(PostOutput(key="k", kind="text", text="a "))
    await trio.sleep(2.0)
    await idle.apply(AppendOutput(key="k", seq=1, text="b "))  # sends the message, now due
    assert platform.messages("c1")
    assert idle.apply_nowait(AppendOutput(key="k", seq=2, text="c")) is None
    budget = RequestBudget(DISCORD_BUDGET)  # (its edits: the background task's, when due)
    async with (
        trio.open_nursery() as nursery,
        StreamRenderer(platform, "c2", budget=budget) as renderer,
    ):
        await nursery.start(budget.run)
        await renderer.apply(PostOutput(key="k", kind="text", text="a "))
        # Its first message waits one pacing interval: not posted yet.
        assert renderer.apply_nowait(AppendOutput(key="k", seq=1, text="b ")) is None
        assert renderer.apply_nowait(PostOutput(key="j", kind="text", text="x")) is None
        await trio.sleep(1.0)
        # Posted meanwhile by the background task (no ``on_posted``): reported by the next
        # call, as ``apply`` reports it.
        assert renderer.apply_nowait(AppendOutput(key="k", seq=2, text="c ")) == [
            ("k", (platform.messages("c2")[0].id,))
        ]
        # An append of a seq already applied is dropped, counted as ``apply`` counts it.
        before = renderer.statistics().ignored_appends
        assert renderer.apply_nowait(AppendOutput(key="k", seq=2, text="c ")) == []
        assert renderer.statistics().ignored_appends == before + 1
        # While something holds the renderer (the background task's paced edit, an
        # ``apply`` waiting for the platform), an append waits its turn in ``apply``.
        async with renderer._lock:
            assert renderer.apply_nowait(AppendOutput(key="k", seq=3, text="d ")) is None
        # (The background task, poked by the appends, waited for the renderer to edit the
        # message: trio's lock went to it on release. Once its edit is made, the renderer
        # is free again.)
        await trio.sleep(0.1)
        assert renderer.apply_nowait(AppendOutput(key="k", seq=3, text="d ")) == []
        await renderer.flush()
        assert platform.messages("c2")[0].text.rstrip() == "a c d"
        nursery.cancel_scope.cancel()

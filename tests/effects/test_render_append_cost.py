"""``StreamRenderer.apply`` of an append to a streaming message: no scheduler round and no
wake-up of the background task (the commonest effect of a busy bot; each cost a task step),
while the paced edit still goes out when it falls due, with all the text."""

from __future__ import annotations

import trio

from threadspindle.effects.render import StreamRenderer
from threadspindle.effects.request_budget import DISCORD_BUDGET, RequestBudget
from threadspindle.runtime.core.effect_types import AppendOutput, PostOutput
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

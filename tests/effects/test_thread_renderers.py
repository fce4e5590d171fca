"""``ThreadRenderers``: one renderer per thread, and what becomes of it when its owner is
done with it (the thread's actor closed it: an idle sweep, an archive). Each kept about
20 KB and a background task for every thread ever shown, for the bot's lifetime."""

from __future__ import annotations

import trio

from threadspindle.effects.thread_renderers import ThreadRenderers
from threadspindle.runtime.core.effect_types import AppendOutput, PostOutput, SealOutput
from threadspindle.testkit.recording_platform import RecordingPlatform


async def _answer(renderers: ThreadRenderers, thread: str, n: int = 1) -> None:
    renderer = renderers.renderer(thread)
    key = f"{thread}/out/{n}"
    await renderer.apply(PostOutput(key=key, kind="text", text="part one", run_id="r1"))
    await renderer.apply(AppendOutput(key=key, seq=1, text=", part two"))
    await renderer.apply(SealOutput(key=key))


async def test_a_renderer_closed_by_its_owner_is_forgotten_and_its_task_ends(
    autojump_clock: object,
) -> None:
    platform = RecordingPlatform()
    async with ThreadRenderers() as renderers:
        renderers.attach(platform)
        for n in range(50):
            await _answer(renderers, f"t{n}")
        await trio.sleep(0.1)
        assert len(renderers.renderers) == 50 and renderers.running == 50
        for n in range(50):
            await renderers.renderers[f"t{n}"].aclose()
        await trio.sleep(0.1)
        assert renderers.renderers == {} and renderers.running == 0
        for n in range(50):
            assert platform.texts(f"t{n}") == ["part one, part two"]  # nothing lost
        # The thread back (its actor made again): a fresh renderer, working as before.
        await _answer(renderers, "t0", 2)
        await trio.sleep(1.0)
        assert renderers.running == 1
        assert platform.texts("t0") == ["part one, part two"] * 2


async def test_a_renderer_whose_close_did_not_finish_keeps_its_task(
    autojump_clock: object,
) -> None:
    """A close cut short (the platform down, the actor's drain time over) leaves edits to
    make: that renderer stays, and its task makes them when the platform is back."""
    platform = RecordingPlatform()
    async with ThreadRenderers() as renderers:
        renderers.attach(platform)
        renderer = renderers.renderer("t1")
        key = "t1/out/1"
        await renderer.apply(PostOutput(key=key, kind="text", text="first", run_id="r1"))
        await trio.sleep(1.0)
        platform.server_error(kind="edit", times=4)  # about 7 s of retries, backing off
        async with trio.open_nursery() as nursery:
            append = AppendOutput(key=key, seq=1, text=" and more")
            nursery.start_soon(renderer.apply, append)
            await trio.sleep(0.1)
            with trio.move_on_after(2.0) as cut:
                await renderer.aclose()
            assert cut.cancelled_caught
        assert renderers.renderers == {"t1": renderer} and renderers.running == 1
        await trio.sleep(30.0)
        assert platform.texts("t1") == ["first and more"]

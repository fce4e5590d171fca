"""Thread renames through the stream renderer: paced by the platform's window (Discord: 2
per 10 minutes), coalesced to the latest title, the same title never sent twice."""

from __future__ import annotations

import trio

from threadspindle.effects.platform import PlatformLimits
from threadspindle.effects.render import StreamRenderer
from threadspindle.runtime.core.effect_types import RenameThread
from threadspindle.testkit.recording_platform import RecordingPlatform


async def test_renames_are_paced_and_coalesced_to_the_latest(autojump_clock) -> None:
    platform = RecordingPlatform(PlatformLimits(renames_per_window=2, rename_window_s=600.0))
    async with StreamRenderer(platform, "t1") as renderer:
        start = trio.current_time()
        await renderer.apply(RenameThread(title="First"))
        await renderer.apply(RenameThread(title="Second"))
        assert platform.titles["t1"] == ["First", "Second"]  # two fit in the window
        await renderer.apply(RenameThread(title="Third"))
        await trio.sleep(60)
        await renderer.apply(RenameThread(title="Fourth"))
        await renderer.apply(RenameThread(title="Fourth"))
        assert platform.titles["t1"] == ["First", "Second"]  # the window is full
        await trio.sleep(600)
        assert platform.titles["t1"] == ["First", "Second", "Fourth"]  # only the latest
        renames = platform.calls_of("rename")
        assert renames[2].at - start >= 600.0
        stats = renderer.statistics()
        assert stats.renames == 3 and stats.titles_coalesced == 1


async def test_the_same_title_is_not_sent_again(autojump_clock) -> None:
    platform = RecordingPlatform()
    async with StreamRenderer(platform, "t1") as renderer:
        await renderer.apply(RenameThread(title="Same"))
        await renderer.apply(RenameThread(title="Same"))
        assert platform.titles["t1"] == ["Same"]


async def test_the_console_shows_a_title_as_a_line(autojump_clock) -> None:
    import io

    from threadspindle.effects.console_platform import ConsolePlatform

    out = io.StringIO()
    platform = ConsolePlatform(out, rich=False, color=False)
    async with StreamRenderer(platform, "console:main") as renderer:
        for n in range(3):  # no rename window on a terminal: each title is shown
            await renderer.apply(RenameThread(title=f"Title {n}"))
    assert out.getvalue().splitlines() == [f"✎ thread title: Title {n}" for n in range(3)]
    assert platform.titles == {"console:main": "Title 2"}

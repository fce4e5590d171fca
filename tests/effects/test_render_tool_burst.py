"""A burst of tool calls on Discord (``render_pacing``: ``join_cards``): each tool call is a
card message, and Discord posts 5 messages per 5 s in a channel. So 40 cards were 40 sends,
one a second, and the answer after them came 40 s after the agent gave it. While the
channel's sends wait for tokens, finished cards now wait to go out joined: every card once,
in order, the answer seconds later. Cards that come slower than the channel's limit stay a
message each, as before. The real core and renderer, the connection's real budget
(``DISCORD_BUDGET``), in trio's mock time."""

from __future__ import annotations

import math

import trio

from threadspindle.effects.budget_limits import DISCORD_BUDGET
from threadspindle.effects.render import CHAT_EFFECTS
from threadspindle.effects.thread_renderers import ThreadRenderers
from threadspindle.runtime.core.actions import ActionBase
from threadspindle.runtime.core.model import Policy, ThreadState
from threadspindle.runtime.core.transitions import transition
from threadspindle.testkit.recording_platform import RecordingPlatform
from threadspindle.testkit.thread_script import ThreadScript


def _run(tools: int, every: float) -> tuple[list[tuple[float, ActionBase]], list[str]]:
    """A run of ``tools`` tool calls started ``every`` seconds apart, each finished at once,
    then the answer; as (pause before, action), and the cards' files in order."""
    s = ThreadScript("t1")
    story: list[tuple[float, ActionBase]] = [
        (0.0, s.start("claude", "/w", "/w")),
        (0.1, s.user("go")),
    ]
    files = [f"file{i}.py" for i in range(tools)]
    for i, name in enumerate(files):
        story.append((every, s.tool("r1", f"x{i}", "Read", name)))
        story.append((0.01, s.tool_done("r1", f"x{i}", "ok")))
    story += [(0.01, s.text("r1", "The answer.", block="b")), (0.01, s.done("r1"))]
    return story, files


async def _play(story: list[tuple[float, ActionBase]]) -> tuple[RecordingPlatform, float]:
    """The story through the core and a renderer sharing Discord's budget; the platform
    and the (mock) time the agent gave the answer. The effects reach the renderer through
    a queue, as the reactor's chat lane hands them over: the agent does not wait for the
    chat."""
    platform = RecordingPlatform()
    answered = 0.0
    send, receive = trio.open_memory_channel[object](math.inf)

    async def agent() -> None:
        nonlocal answered
        state = ThreadState.new("t1", Policy(allowed_roots=("/w",)))
        async with send:
            for pause, action in story:
                await trio.sleep(pause)
                if "The answer." in repr(action):
                    answered = trio.current_time()
                result = transition(state, action)
                state = result.state
                for effect in result.effects:
                    if isinstance(effect, CHAT_EFFECTS):
                        send.send_nowait(effect)

    async with ThreadRenderers(budget=DISCORD_BUDGET) as renderers:
        renderers.attach(platform)
        renderer = renderers.renderer("t1")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent)
            async for effect in receive:
                await renderer.apply(effect)  # type: ignore[arg-type]
        await renderers.flush()
    return platform, answered


def _cards(platform: RecordingPlatform) -> list[str]:
    """Every card's file, in the order the channel shows them."""
    return [
        line.split("Read(", 1)[1].split(")", 1)[0]
        for text in platform.texts("t1")
        for line in text.splitlines()
        if "🔧" in line
    ]


def _most_sends_in(platform: RecordingPlatform, span: float) -> int:
    times = sorted(call.at for call in platform.calls_of("send"))
    return max((sum(1 for t in times if s <= t < s + span) for s in times), default=0)


async def test_a_burst_of_tool_calls_is_joined_and_the_answer_comes_seconds_later(
    autojump_clock: object,
) -> None:
    story, files = _run(40, every=0.01)
    platform, answered = await _play(story)
    assert _cards(platform) == files  # each card once, in order
    texts = platform.texts("t1")
    (answer,) = [c for c in platform.calls_of("send") if c.text and "The answer." in c.text]
    assert answer.at - answered < 8.0  # 40 s before
    assert texts.index("The answer.") > max(i for i, t in enumerate(texts) if "🔧" in t)
    assert len(platform.calls_of("send")) <= 12  # 43 before
    assert _most_sends_in(platform, 5.0) <= 5  # the channel's limit, kept
    joined = [t for t in texts if t.count("🔧") > 1]
    assert joined and not any(m.edits for m in platform.messages("t1") if m.text in joined)


async def test_tool_calls_slower_than_the_channels_limit_stay_a_message_each(
    autojump_clock: object,
) -> None:
    story, files = _run(8, every=2.0)
    platform, _ = await _play(story)
    assert _cards(platform) == files
    assert all(t.count("🔧") <= 1 for t in platform.texts("t1"))

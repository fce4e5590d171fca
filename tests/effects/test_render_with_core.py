"""The renderer behind the real pure core: agent events -> ``transition`` -> chat effects ->
``StreamRenderer`` -> the recording platform, in trio's mock time.

A fault plan (429s with Retry-After, 5xx, a send whose answer was lost) must not change
what the thread finally shows: same messages, same order, none lost, none doubled.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from threadspindle.effects.render import CHAT_EFFECTS, StreamRenderer
from threadspindle.effects.retrying_platform import RetryPolicy
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core import agent_events as E
from threadspindle.runtime.core.model import Policy, ThreadState
from threadspindle.runtime.core.transitions import transition
from threadspindle.testkit.recording_platform import RecordingPlatform
from threadspindle.testkit.thread_script import ThreadScript

THREAD = "t1"
ANSWER = (
    "The bug is in the parser: it drops the last line. See https://example.com/issue/7.\n"
    "Here is the fix:\n```python\ndef parse(lines):\n    return [l for l in lines if l]\n```\n"
    "All tests pass now.\n"
)


def a_story() -> Iterator[tuple[float, A.ActionBase]]:
    """Two runs (the second one queued during the first), as (pause before, action)."""
    s = ThreadScript(THREAD)
    yield 0.0, s.start("claude", "/work/app", "/work/app")
    yield 0.1, s.user("fix the parser")
    yield 0.1, s.queue("then update the changelog")
    for piece in ("Let me look ", "at the parser ", "first."):
        yield 0.05, s.agent("r1", E.ThinkingDelta(text=piece))
    for n, (seconds, error) in enumerate([(0.2, False), (2.5, False), (0.3, True)]):
        yield 0.1, s.tool("r1", f"tool{n}", "Bash", f"pytest -k case{n}")
        yield seconds, s.tool_done("r1", f"tool{n}", "collected 3 items\n" * 4, is_error=error)
    yield 0.1, s.permission("r1", "perm1", "Write")
    yield 3.0, s.allow("perm1")
    for start in range(0, len(ANSWER), 12):
        yield 0.05, s.text("r1", ANSWER[start : start + 12], block="b1")
    yield 0.1, s.done("r1")
    yield 0.3, s.text("r2", "Changelog updated.", block="b1")
    yield 0.1, s.done("r2")


def play(platform: RecordingPlatform) -> StreamRenderer:
    """Run the story through the core and the renderer; returns the renderer."""
    renderer = StreamRenderer(platform, THREAD)

    async def main() -> None:
        state = ThreadState.new(THREAD, Policy(allowed_roots=("/work",)))
        async with renderer:
            for pause, action in a_story():
                await trio.sleep(pause)
                result = transition(state, action)
                state = result.state
                for effect in result.effects:
                    if isinstance(effect, CHAT_EFFECTS):
                        await renderer.apply(effect)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return renderer


BASELINE = RecordingPlatform()
BASELINE_RENDERER = play(BASELINE)


def test_a_run_reads_as_the_core_meant_it() -> None:
    assert BASELINE.texts(THREAD) == [
        "Started claude in /work/app.",
        "Queued (position 1).",
        "-# 💭 Let me look at the parser first.",
        "-# 🔧 `Bash(pytest -k case0)`\n```\n" + "collected 3 items\n" * 4 + "```",
        "-# 🔧 `Bash(pytest -k case1)`\n```\n" + "collected 3 items\n" * 4 + "```",
        "-# 🔧 `Bash(pytest -k case2)`\n⚠️ **error**\n```\n" + "collected 3 items\n" * 4 + "```",
        "🔐 **Permission needed:** `Write`\n`touch x`\n-# Allowed.",
        ANSWER.replace("https://example.com/issue/7", "<https://example.com/issue/7>"),
        "1.2s · $0.0100 · m",
        "» u1: then update the changelog",
        "Changelog updated.",
        "1.2s · $0.0100 · m",
    ]
    messages = BASELINE.messages(THREAD)
    assert messages[6].buttons == ()  # the answered prompt lost its buttons
    # Only the slow tool (2.5 s) showed its header first and needed an edit.
    assert [m.edits for m in messages[3:6]] == [0, 1, 0]


def test_typing_runs_with_the_run_and_stops_after_the_footer() -> None:
    last_footer = max(c.at for c in BASELINE.calls_of("send") if "$0.0100" in (c.text or ""))
    typing = [c.at for c in BASELINE.calls_of("typing")]
    assert typing and typing[0] < 1.0
    assert all(t <= last_footer for t in typing)


def test_platform_calls_of_the_story() -> None:
    calls = collections.Counter(c.kind for c in BASELINE.calls)
    stats = BASELINE_RENDERER.statistics()
    assert calls["send"] + calls["reply"] == stats.sends + stats.replies == 12
    assert stats.retries == 0 and stats.dirty_messages == 0


# (kind, nth call of that kind, fault): nth within what the story makes of each kind, so
# every fault strikes (the story makes 10 sends, 2 replies, 3 edits, 5+ typing calls).
_CALLS_OF = {"send": 10, "edit": 3, "typing": 5, None: 20}
_fault = st.sampled_from(list(_CALLS_OF)).flatmap(
    lambda kind: st.tuples(
        st.just(kind),
        st.integers(1, _CALLS_OF[kind]),
        st.sampled_from(["429", "503", "lost answer"]),
    )
)


# At most RetryPolicy.max_server_retries faults: six 5xx in a row on one call are past
# what the renderer retries (it gives up on the output, rightly; Hypothesis found that
# plan), and this test is about faults the retries absorb.
@settings(max_examples=60, deadline=None)
@given(plan=st.lists(_fault, min_size=1, max_size=RetryPolicy().max_server_retries))
def test_faults_change_nothing_the_thread_shows(plan: list[tuple[str | None, int, str]]) -> None:
    platform = RecordingPlatform()
    for kind, nth, fault in plan:
        if fault == "429":
            platform.rate_limit(kind=kind, nth=nth, retry_after=1.25)
        else:
            platform.server_error(kind=kind, nth=nth, after_effect=fault == "lost answer")
    renderer = play(platform)
    assert platform.transcript(THREAD) == BASELINE.transcript(THREAD)
    assert [m.text for m in platform.messages(THREAD)] == BASELINE.texts(THREAD)
    failed = [c for c in platform.calls if c.error is not None]
    assert failed  # the plan struck
    stats = renderer.statistics()
    assert stats.retries + stats.failures == len(failed)

"""A run's footer riding in its answer's last message (``effects.render_compose``): when the
connection's request budget is short, the footer joins the answer's final edit (one
request a run less); with tokens to spare, or when it would not fit, it is a message of its
own; an edit of a riding footer edits the answer's message, and after a restart (the
answer's text unknown) it becomes a message of its own. In trio's mock time over the
recording platform."""

from __future__ import annotations

import trio

from threadspindle.effects.render import Posted, StreamRenderer
from threadspindle.effects.request_budget import BudgetLimits, Priority
from threadspindle.effects.thread_renderers import ThreadRenderers
from threadspindle.runtime.core.effect_types import (
    AppendOutput,
    EditOutput,
    PostOutput,
    SealOutput,
)
from threadspindle.testkit.recording_platform import RecordingPlatform

BUDGET = BudgetLimits(requests=10, window_s=1.0, margin_s=0.0, reserve=1)


async def spend_the_window(renderers: ThreadRenderers) -> None:
    """Every global token of the next second taken: the budget is short."""
    budget = renderers.budget
    assert budget is not None
    for n in range(BUDGET.requests):
        await budget.acquire(Priority.URGENT, f"other{n}", "send")
        budget.release(f"other{n}", "send")
    assert budget.short()


async def answer(
    renderers: ThreadRenderers, text: str, *, short: bool
) -> tuple[StreamRenderer, list[Posted]]:
    """A streamed answer (sent, then grown), sealed and followed by its footer; returns
    the thread's renderer and what the footer's ``apply`` reported posted."""
    renderer = renderers.renderer("t")
    await renderer.apply(PostOutput(key="a", kind="text", text="The answer "))
    await trio.sleep(2)  # its first message is sent
    await renderer.apply(AppendOutput(key="a", seq=1, text=text))
    if short:
        await spend_the_window(renderers)
    await renderer.apply(SealOutput(key="a"))
    posted = await renderer.apply(PostOutput(key="f", kind="footer", text="2.0s · $0.0100"))
    return renderer, posted


async def test_a_short_budget_puts_the_footer_in_the_answers_final_edit(
    autojump_clock: object,
) -> None:
    platform = RecordingPlatform()
    async with ThreadRenderers(budget=BUDGET) as renderers:
        renderers.attach(platform)
        renderer, posted = await answer(renderers, "is 42.", short=True)
        (message,) = platform.messages("t")
        assert message.text == "The answer is 42.\n-# 2.0s · $0.0100"
        assert platform.count("send") == 1 and platform.count("edit") == 1  # one edit for both
        assert ("f", (message.id,)) in posted  # the footer's key is recorded: never posted again
        # The same footer again (a redelivered effect) is not posted a second time.
        await renderer.apply(PostOutput(key="f", kind="footer", text="again"))
        assert platform.count("send") == 1


async def test_with_tokens_to_spare_the_footer_is_a_message_of_its_own(
    autojump_clock: object,
) -> None:
    platform = RecordingPlatform()
    async with ThreadRenderers(budget=BUDGET) as renderers:
        renderers.attach(platform)
        await answer(renderers, "is 42.", short=False)
        assert platform.texts("t") == ["The answer is 42.", "2.0s · $0.0100"]


async def test_a_footer_that_would_not_fit_is_a_message_of_its_own(
    autojump_clock: object,
) -> None:
    platform = RecordingPlatform()
    async with ThreadRenderers(budget=BUDGET) as renderers:
        renderers.attach(platform)
        room = platform.limits.char_limit - platform.limits.split_margin
        await answer(renderers, "x" * (room - len("The answer ") - 5), short=True)
        texts = platform.texts("t")
        assert texts[-1] == "2.0s · $0.0100" and "-#" not in texts[0]


async def test_an_edit_of_a_riding_footer_edits_the_answers_message(
    autojump_clock: object,
) -> None:
    platform = RecordingPlatform()
    async with ThreadRenderers(budget=BUDGET) as renderers:
        renderers.attach(platform)
        renderer, _ = await answer(renderers, "is 42.", short=True)
        await renderer.apply(EditOutput(key="f", text="2.0s · $0.0100 · 3 files changed"))
        assert platform.texts("t") == ["The answer is 42.\n-# 2.0s · $0.0100 · 3 files changed"]
        # Grown past what fits: the answer gets its own text back, the footer a message.
        await renderer.apply(EditOutput(key="f", text="y" * 2000))
        await renderer.flush()
        texts = platform.texts("t")
        assert texts[0] == "The answer is 42." and texts[1].startswith("y")


async def test_after_a_restart_an_edit_of_a_footer_that_rode_is_a_message_of_its_own(
    autojump_clock: object,
) -> None:
    """The log says the answer and its footer were posted as one message; a renderer made
    after a restart does not know the answer's text, so it must not overwrite it."""
    platform = RecordingPlatform()
    async with ThreadRenderers(budget=BUDGET) as renderers:
        renderers.attach(platform)
        await answer(renderers, "is 42.", short=True)
        (message,) = platform.messages("t")
    async with ThreadRenderers(budget=BUDGET) as renderers:
        renderers.attach(platform)
        renderer = renderers.renderer("t")
        renderer.known("a", (message.id,))
        renderer.known("f", (message.id,))
        await renderer.apply(EditOutput(key="f", text="2.0s · $0.0100 · 3 files changed"))
        await renderer.flush()
    assert platform.texts("t") == [
        "The answer is 42.\n-# 2.0s · $0.0100",
        "2.0s · $0.0100 · 3 files changed",
    ]

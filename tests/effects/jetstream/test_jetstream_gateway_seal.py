"""The cluster gateway acknowledges a seal only once its final text is on the platform: a
streamed answer's seal leaves its last edit for the next effect (a footer may join it),
and a gateway that acked it before that edit and then died would leave the answer short
of its last words for good (the next gateway never hears of that output again). In trio's
mock time, the gateway's apply loop over a real renderer and the recording platform (no
NATS: the thread's renderer is in hand and reports are recorded)."""

from __future__ import annotations

import trio

from threadspindle.effects.jetstream.gateway import Gateway
from threadspindle.effects.request_budget import BudgetLimits
from threadspindle.effects.thread_renderers import ThreadRenderers
from threadspindle.runtime.core.effect_types import (
    AppendOutput,
    Effect,
    PostOutput,
    SealOutput,
)
from threadspindle.testkit.recording_platform import RecordingPlatform

BUDGET = BudgetLimits(requests=10, window_s=1.0, margin_s=0.0, reserve=1)


class Outbox:
    """Records each ack with what the thread showed at that moment."""

    def __init__(self, platform: RecordingPlatform) -> None:
        self.platform = platform
        self.acked: list[tuple[str, list[str]]] = []

    async def ack(self, msg: str) -> None:
        self.acked.append((msg, self.platform.texts("t")))


async def test_a_seal_is_acked_once_its_final_text_is_on_the_platform(
    autojump_clock: object,
) -> None:
    platform = RecordingPlatform()
    async with ThreadRenderers(budget=BUDGET) as renderers:
        renderers.attach(platform)
        renderer = renderers.renderer("t")
        gateway = Gateway(None, None, lambda thread_id: renderer)  # type: ignore[arg-type]
        gateway.renderers["t"] = renderer
        reported: list[tuple[str, tuple[str, ...]]] = []

        async def report(thread_id: str, key: str, message_ids: tuple[str, ...]) -> None:
            reported.append((key, message_ids))

        gateway.report = report  # type: ignore[method-assign]
        outbox = Outbox(platform)

        async def batch(*items: tuple[str, Effect]) -> None:
            await gateway._apply_all(outbox, "t", list(items))  # type: ignore[arg-type]

        await batch(("m1", PostOutput(key="a", kind="text", text="Hello ")))
        await trio.sleep(2)  # its first message is sent
        # The seal last in its batch: settled before it is acked.
        await batch(("m2", AppendOutput(key="a", seq=1, text="world")), ("m3", SealOutput(key="a")))
        assert outbox.acked[-2:] == [("m2", ["Hello "]), ("m3", ["Hello world"])]
        # The seal followed by its footer: acked once the footer's apply made its edit.
        await batch(("m4", PostOutput(key="b", kind="text", text="Second ")))
        await trio.sleep(2)
        await batch(
            ("m5", AppendOutput(key="b", seq=1, text="answer")),
            ("m6", SealOutput(key="b")),
            ("m7", PostOutput(key="f", kind="footer", text="1.0s · $0.0010")),
        )
        acked = dict(outbox.acked)
        assert acked["m6"][:2] == ["Hello world", "Second answer"]
        assert [msg for msg, _ in outbox.acked[-3:]] == ["m5", "m6", "m7"]
        assert ("f", (platform.messages("t")[-1].id,)) in reported

"""``Gateway.tell``: the gateway's own answer in a thread (a conversation refused because no
runner serves its folder) goes through the thread's renderer when the gateway has one, and
never replaces it: a chat platform's renderers retire a thread's renderer when another is
made for it, and the gateway would go on applying the runner's effects to a retired one
whose paced edits no task sends any more."""

from __future__ import annotations

from threadspindle.effects.jetstream.gateway import Gateway
from threadspindle.runtime.core.effect_types import ReplyToCommand
from threadspindle.testkit.fake_chat import RecordingRenderer, RenderWorld


def reply(n: int) -> ReplyToCommand:
    return ReplyToCommand(key=f"t/reply/a{n}", action_id=f"a{n}", text=f"refused {n}")


async def test_the_gateways_own_answer_uses_the_threads_renderer() -> None:
    world = RenderWorld()
    made: list[str] = []

    def factory(thread_id: str) -> RecordingRenderer:
        made.append(thread_id)
        return RecordingRenderer(thread_id, world)

    gateway = Gateway(None, None, factory)  # type: ignore[arg-type]  # tell needs no NATS
    held = RecordingRenderer("t", world)
    gateway.renderers["t"] = held

    await gateway.tell("t", reply(1))
    assert made == []  # the thread's renderer answered: nothing made, nothing replaced
    assert gateway.renderers["t"] is held
    assert world.outputs["t/reply/a1"].text == "refused 1"

    closed: list[str] = []

    class Closing(RecordingRenderer):
        async def aclose(self) -> list[tuple[str, tuple[str, ...]]]:
            closed.append(self.thread_id)
            return await super().aclose()

    def closing(thread_id: str) -> Closing:
        made.append(thread_id)
        return Closing(thread_id, world)

    gateway._factory = closing  # type: ignore[assignment]
    await gateway.tell("u", reply(2))  # a thread the gateway renders nothing for yet
    assert made == ["u"]
    assert "u" not in gateway.renderers  # made for the answer alone, not kept
    assert closed == ["u"]  # and closed after it: the platform's renderers let it go
    assert world.outputs["t/reply/a2"].text == "refused 2"

"""``/steer`` and the `` steer`` suffix on WhatsApp, against the fake Cloud API with the
scripted fake agent (which steers): both reach the running turn without interrupting it."""

from __future__ import annotations

from pathlib import Path

from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_whatsapp.stack import WhatsAppWorld, whatsapp_stack


async def test_steer_suffix_and_command_reach_the_running_turn(
    wa: WhatsAppWorld, tmp_path: Path
) -> None:
    async with whatsapp_stack(wa, tmp_path) as stack:
        thread = await stack.start_chat()
        user = wa.chat(thread)
        wa.fake.say(user, "LONGTOOL work")
        await wait_for(lambda: [t for _, t in stack.agents.delivered] == ["LONGTOOL work"])
        await wait_for(lambda: stack.app.runtime.snapshot(thread).run.phase.value == "running")
        wa.fake.say(user, "also add tests steer")
        wa.fake.say(user, "/steer and docs")
        await wait_for(lambda: len(stack.agents.steered) == 2)
        assert sorted(t for _, t in stack.agents.steered) == ["also add tests", "and docs"]
        assert stack.agents.interrupts == []
        assert [t for _, t in stack.agents.delivered] == ["LONGTOOL work"]

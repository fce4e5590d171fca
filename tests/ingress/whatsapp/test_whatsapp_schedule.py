"""``/schedule`` and ``/verbosity`` as WhatsApp plain-text commands, end to end against the
fake Cloud API and the live runtime (the schedule timer on the real clock)."""

from __future__ import annotations

from pathlib import Path

from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_whatsapp.stack import WhatsAppWorld, whatsapp_stack


async def test_a_scheduled_prompt_fires_in_the_chat(wa: WhatsAppWorld, tmp_path: Path) -> None:
    async with whatsapp_stack(wa, tmp_path) as stack:
        thread = await stack.start_chat()
        user = wa.chat(thread)
        wa.fake.say(user, "/verbosity tools")
        await wait_for(lambda: stack.runtime.snapshot(thread).verbosity == "tools")
        wa.fake.say(user, "/schedule in 1s a prompt for later")
        await wait_for(
            lambda: [text for _, text in stack.agents.delivered],
            lambda got: got == ["a prompt for later"],
            timeout=15,
        )
        await stack.until_footers(thread, 1)
        texts = [m.text for m in wa.bot_messages(thread)]
        assert any("Scheduled s1" in t for t in texts)
        assert any("Schedule s1 is due" in t for t in texts)

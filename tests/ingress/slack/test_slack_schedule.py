"""``@Spindle schedule ...`` and ``@Spindle verbosity ...`` in a Slack thread, end to end
against the fake Slack and the live runtime (its schedule timer on the real clock)."""

from __future__ import annotations

from pathlib import Path

from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_slack.stack import SlackWorld, slack_stack


async def test_a_scheduled_prompt_fires_in_the_thread(sl: SlackWorld, tmp_path: Path) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        sl.command(thread, "verbosity text")
        await wait_for(lambda: stack.runtime.snapshot(thread).verbosity == "text")
        sl.command(thread, "schedule in 1s a prompt for later")
        await wait_for(
            lambda: [text for _, text in stack.agents.delivered],
            lambda got: got == ["a prompt for later"],
            timeout=15,
        )
        await wait_for(
            lambda: [m.text for m in sl.bot_messages(thread)],
            lambda texts: any("Schedule s1 is due" in t for t in texts),
        )

"""The whole Slack app through the real slack-bolt against the fake Slack: runtime on a real
SQLite log, stream renderer over SlackPlatform, scripted fake agent. What is Slack's own is
here; what every platform must do is tests/platforms/test_platform_contract.py."""

from __future__ import annotations

from pathlib import Path

from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_slack.stack import SlackStack, SlackWorld, slack_stack


def _delivered(stack: SlackStack) -> list[str]:
    return [text for _, text in stack.agents.delivered]


async def test_a_thread_answers_with_one_footer(sl: SlackWorld, tmp_path: Path) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        sl.say(thread, "hi")
        messages = await stack.until_footers(thread, 1)
        assert "Hello from fake agent." in [m.shown for m in messages]
        assert _delivered(stack) == ["hi"]

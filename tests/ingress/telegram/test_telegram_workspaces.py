"""Workspace commands on Telegram, through the real python-telegram-bot against the fake
Telegram: `!` is a shell command (refused here: nobody is on the shell allow-list), not a
prompt; /undo and /worktree are parsed in Telegram's spelling."""

from __future__ import annotations

from pathlib import Path

from threadspindle.effects.telegram_platform import telegram_thread_id
from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_telegram.stack import TelegramWorld, telegram_stack


async def test_bang_is_a_shell_command_and_workspace_commands_reach_the_core(
    tg: TelegramWorld, tmp_path: Path
) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        thread = telegram_thread_id(tg.alice)
        tg.say(thread, f"/claude start {tg.workdir}")
        await wait_for(
            lambda: stack.runtime.snapshot(thread),
            lambda s: s is not None and s.conversation is not None,
        )
        tg.say(thread, "!touch made-by-shell")
        await wait_for(
            lambda: [m.text for m in tg.bot_messages(thread)],
            lambda texts: any("Shell commands are not enabled for you" in t for t in texts),
        )
        assert stack.agents.delivered == []  # not a prompt
        assert not (Path(tg.workdir) / "made-by-shell").exists()
        tg.say(thread, "/undo")
        await wait_for(
            lambda: [m.text for m in tg.bot_messages(thread)],
            lambda texts: any("Nothing to undo" in t for t in texts),
        )
        tg.say(thread, "/worktree_new bad/name")
        await wait_for(
            lambda: [m.text for m in tg.bot_messages(thread)],
            lambda texts: any("A worktree name is" in t for t in texts),
        )
        names = [c["command"] for c in tg.fake.commands()]
        assert {"undo", "redo", "diff", "shell", "worktree"} <= set(names)
        state = stack.runtime.snapshot(thread)
        assert state is not None and state.counters.rejected == 1  # the shell command
        assert state.queue == () and state.run is None

"""``spindle run`` as one process serving Discord, Telegram and Slack at once (their fakes
on 127.0.0.1), from one config file and the environment: a project message on each platform
gets its own thread and its echo answer, and SIGTERM stops all three cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from threadspindle.testkit.fake_discord.harness import fake_world
from threadspindle.testkit.fake_slack.server import APP_TOKEN, BOT_TOKEN, FakeSlack
from threadspindle.testkit.fake_telegram.server import FakeTelegram

ROOT = Path(__file__).resolve().parents[2]
TELEGRAM_TOKEN = "123456789:" + "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_one_process_serves_discord_telegram_and_slack(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with (
        fake_world(work) as world,
        FakeTelegram(token=TELEGRAM_TOKEN) as telegram,
        FakeSlack() as slack,
    ):
        tg_alice, tg_project = telegram.add_user("alice"), telegram.add_group("project")
        sl_alice, sl_project = slack.add_user("alice"), slack.add_channel("proj")
        config = tmp_path / "spindle.toml"
        config.write_text(
            f"""
[runtime]
allowed_roots = ["{work}"]
default_agent = "echo"

[discord]
guild_ids = [{world.guild}]
allowed_user_ids = [{world.alice}]
rest_base_url = "{world.fake.rest_base}"
gateway_url = "{world.fake.gateway_url}"

[discord.project_channels."{world.project_channel}"]
agent = "echo"
workdir = "{work}"

[telegram]
base_url = "{telegram.base_url}"
allowed_user_ids = [{tg_alice}]
min_edit_interval_s = 0.3

[telegram.project_groups."{tg_project}"]
agent = "echo"
workdir = "{work}"

[slack]
base_url = "{slack.base_url}"
allowed_user_ids = ["{sl_alice}"]
min_edit_interval_s = 0.3

[slack.project_channels."{sl_project}"]
agent = "echo"
workdir = "{work}"
"""
        )
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "PYTHONPATH": str(ROOT),
            "SPINDLE_DATA_DIR": str(tmp_path / "data"),
            "SPINDLE_DISCORD_TOKEN": "fake-bot-token-for-tests.fake.token",
            "SPINDLE_TELEGRAM_TOKEN": TELEGRAM_TOKEN,
            "SPINDLE_SLACK_BOT_TOKEN": BOT_TOKEN,
            "SPINDLE_SLACK_APP_TOKEN": APP_TOKEN,
            "SPINDLE_MCP__PORT": "0",
        }
        bot = subprocess.Popen(
            [sys.executable, "-m", "threadspindle.app.cli", "--config", str(config), "run"],
            env=env,
            cwd=work,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(lambda: world.fake.gateway_counts()["identifies"], 60, "the gateway")
            wait_for(lambda: telegram.offsets(), 60, "the first getUpdates")
            wait_for(lambda: slack.connections(), 60, "the Socket Mode connection")
            world.fake.send_message(world.project_channel, world.alice, "hello from discord")
            telegram.send_message(tg_project, tg_alice, "hello from telegram")
            ts = slack.send_message(sl_project, sl_alice, "hello from slack")

            thread = wait_for(lambda: world.fake.threads(world.project_channel), 30, "a thread")[0]
            topic = wait_for(lambda: list(telegram.topics(tg_project)), 30, "a topic")[0]

            def discord_text() -> str:
                return world.fake.transcript(thread)

            def telegram_text() -> str:
                return "\n".join(m.text for m in telegram.bot_messages(tg_project, topic))

            def slack_text() -> str:
                return "\n".join(m.shown for m in slack.bot_messages(sl_project, ts))

            for name, text in (
                ("discord", discord_text),
                ("telegram", telegram_text),
                ("slack", slack_text),
            ):
                wait_for(lambda text=text: "echo (demo agent)" in text(), 60, f"{name}'s footer")
                assert f"hello from {name}" in text()
            assert "telegram" not in discord_text() and "slack" not in telegram_text()
            bot.send_signal(signal.SIGTERM)
            out, err = bot.communicate(timeout=60)
            assert bot.returncode == 0, err
            assert "Connected to Discord, Telegram and Slack" in out + err
            assert slack.unacked() == [] and telegram.unconfirmed() == []
        finally:
            if bot.poll() is None:
                bot.send_signal(signal.SIGTERM)
                try:
                    bot.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    bot.kill()

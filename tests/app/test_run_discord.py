"""``spindle run`` with a Discord token: the real command, as a process, against the fake
Discord on 127.0.0.1, configured only through its config file and environment."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from threadspindle.testkit.fake_discord.harness import World, fake_world

ROOT = Path(__file__).resolve().parents[2]


def wait_for(predicate, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _starter(tmp_path: Path, work: Path, world: World) -> Callable[[], subprocess.Popen[str]]:
    """Writes the config; returns how to start ``spindle run`` with it (as often as asked)."""
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
"""
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "SPINDLE_DATA_DIR": str(tmp_path / "data"),
        "SPINDLE_DISCORD_TOKEN": "fake-bot-token-for-tests.fake.token",  # shaped like one,
        "SPINDLE_MCP__PORT": "0",
    }

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "threadspindle.app.cli", "--config", str(config), "run"],
            env=env,
            cwd=work,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    return start


def _stop(bot: subprocess.Popen[str]) -> None:
    bot.send_signal(signal.SIGTERM)
    _, err = bot.communicate(timeout=60)
    assert bot.returncode == 0, err


def test_spindle_run_serves_discord_and_survives_a_restart(tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    with fake_world(work) as world:
        start = _starter(tmp_path, work, world)

        bot = start()
        try:
            wait_for(lambda: world.fake.commands(world.guild), 60, "slash commands")
            # Posted before the bot has a gateway session, it would never be delivered.
            wait_for(lambda: world.fake.gateway_counts()["identifies"], 60, "the gateway")
            # A message in the project channel opens a thread running the echo agent.
            world.fake.send_message(world.project_channel, world.alice, "hello from discord")
            thread = wait_for(lambda: world.fake.threads(world.project_channel), 30, "a thread")[0]
            wait_for(lambda: "echo (demo agent)" in world.fake.transcript(thread), 30, "a footer")
            transcript = world.fake.transcript(thread)
            assert "hello from discord" in transcript
            # Someone not on the allow-list is refused and nothing runs for them.
            world.fake.send_message(thread, world.mallory, "let me in")
            # A long prompt, then SIGTERM mid-run with a prompt queued behind it.
            world.fake.send_message(thread, world.alice, " ".join(f"w{i}" for i in range(60)))
            world.fake.send_message(thread, world.alice, "after the restart. queue")
            wait_for(lambda: "Queued (position 1)" in world.fake.transcript(thread), 30, "queued")
            wait_for(lambda: "spindle: w0" in world.fake.transcript(thread), 30, "streaming")
            bot.send_signal(signal.SIGTERM)
            out, err = bot.communicate(timeout=60)
            assert bot.returncode == 0, err
            stopped = world.fake.transcript(thread)
            assert "Spindle stopped this run" in stopped and "1 queued prompt(s)" in stopped
            assert "after the restart" not in stopped.split("Spindle stopped this run")[1]
            # The next process picks the queue up where it was.
            bot = start()
            wait_for(
                lambda: world.fake.transcript(thread).count("echo (demo agent)") >= 2,
                60,
                "the queued prompt after the restart",
            )
            final = world.fake.transcript(thread)
            assert "» alice: after the restart" in final
            assert "let me in" not in final.split("let me in", 1)[1]  # never echoed back
        finally:
            if bot.poll() is None:
                bot.send_signal(signal.SIGTERM)
                try:
                    bot.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    bot.kill()


def test_spindle_run_answers_what_was_posted_while_it_was_stopped(tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    with fake_world(work) as world:
        start = _starter(tmp_path, work, world)

        def footers(thread: int) -> int:
            return world.fake.transcript(thread).count("echo (demo agent)")

        def reads(thread: int) -> int:
            calls = world.fake.rest_calls()
            return sum(
                c.method == "GET" and c.path == f"/channels/{thread}/messages" for c in calls
            )

        bot = start()
        try:
            wait_for(lambda: world.fake.gateway_counts()["identifies"], 60, "the gateway")
            world.fake.send_message(world.project_channel, world.alice, "hello")
            thread = wait_for(lambda: world.fake.threads(world.project_channel), 30, "a thread")[0]
            wait_for(lambda: footers(thread) == 1, 30, "the first answer")
            _stop(bot)
            # Posted while no Spindle runs.
            world.fake.send_message(thread, world.alice, "alpha beta")
            world.fake.send_message(thread, world.alice, "gamma delta")
            bot = start()
            wait_for(lambda: footers(thread) == 3, 60, "both answered after the restart")
            transcript = world.fake.transcript(thread)
            notice = "2 messages sent while Spindle was offline are queued."
            assert transcript.count(notice) == 1
            # In order: the notice, then alpha's answer, then gamma's.
            after = transcript.split(notice, 1)[1]
            assert after.index("spindle: alpha beta") < after.index("spindle: gamma delta")
            _stop(bot)
            before = world.fake.transcript(thread)
            bot = start()
            # Once it has read the thread's history (its catch-up), a message is live.
            wait_for(lambda: reads(thread) == 2, 60, "the third start's catch-up")
            world.fake.send_message(thread, world.alice, "epsilon")
            wait_for(lambda: footers(thread) == 4, 60, "the live message answered")
            final = world.fake.transcript(thread)
            assert final.startswith(before)
            added = final[len(before) :]
            # Nothing twice: the restart answered only the new message.
            assert "alpha" not in added and "gamma" not in added and "offline" not in added
            assert "spindle: epsilon" in added
        finally:
            if bot.poll() is None:
                bot.send_signal(signal.SIGTERM)
                try:
                    bot.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    bot.kill()

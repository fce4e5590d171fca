"""``spindle run`` and ``spindle doctor`` with a Telegram token: the real commands, as
processes, against the fake Telegram Bot API on 127.0.0.1, configured only through the config
file and the environment (``SPINDLE_TELEGRAM_TOKEN``)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from threadspindle.effects.telegram_platform import telegram_thread_id
from threadspindle.testkit.fake_telegram.server import FakeTelegram

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "123456789:" + "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"  # shaped as @BotFather's


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@contextmanager
def _telegram() -> Iterator[tuple[FakeTelegram, int, int, int]]:
    with FakeTelegram(token=TOKEN) as fake:
        alice = fake.add_user("alice")
        mallory = fake.add_user("mallory")
        project = fake.add_group("project")
        yield fake, alice, mallory, project


def _config(tmp_path: Path, work: Path, fake: FakeTelegram, alice: int, project: int) -> Path:
    config = tmp_path / "spindle.toml"
    config.write_text(
        f"""
[runtime]
allowed_roots = ["{work}"]
default_agent = "echo"

[telegram]
base_url = "{fake.base_url}"
allowed_user_ids = [{alice}]
min_edit_interval_s = 0.3

[telegram.project_groups."{project}"]
agent = "echo"
workdir = "{work}"
"""
    )
    return config


def _env(tmp_path: Path, token: str = TOKEN) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "SPINDLE_DATA_DIR": str(tmp_path / "data"),
        "SPINDLE_TELEGRAM_TOKEN": token,
        "SPINDLE_MCP__PORT": "0",
    }


def _spindle(config: Path, env: dict[str, str], cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "threadspindle.app.cli", "--config", str(config), *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _transcript(fake: FakeTelegram, chat: int, topic: int) -> str:
    return "\n".join(m.text for m in fake.bot_messages(chat, topic))


def test_spindle_run_serves_telegram_and_keeps_the_queue_over_a_restart(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with _telegram() as (fake, alice, mallory, project):
        config = _config(tmp_path, work, fake, alice, project)
        env = _env(tmp_path)
        bot = _spindle(config, env, work, "run")
        try:
            wait_for(lambda: fake.commands(), 60, "setMyCommands")
            wait_for(lambda: fake.offsets(), 60, "the first getUpdates")
            # A message in the project group's General topic opens a topic running echo.
            fake.send_message(project, alice, "hello from telegram")
            topic = wait_for(lambda: list(fake.topics(project)), 30, "a topic")[0]
            wait_for(
                lambda: "echo (demo agent)" in _transcript(fake, project, topic), 30, "a footer"
            )
            assert "hello from telegram" in _transcript(fake, project, topic)
            # Someone not on the allow-list: nothing runs for them.
            fake.send_message(project, mallory, "let me in", topic=topic)
            # A long prompt, then SIGTERM mid-run with a prompt queued behind it.
            fake.send_message(project, alice, " ".join(f"w{i}" for i in range(60)), topic=topic)
            fake.send_message(project, alice, "after the restart. queue", topic=topic)
            wait_for(
                lambda: "Queued (position 1)" in _transcript(fake, project, topic), 30, "queued"
            )
            wait_for(lambda: "w0" in _transcript(fake, project, topic), 30, "streaming")
            bot.send_signal(signal.SIGTERM)
            _, err = bot.communicate(timeout=60)
            assert bot.returncode == 0, err
            assert TOKEN not in err  # the token never reaches the terminal or the log
            stopped = _transcript(fake, project, topic)
            assert "Spindle stopped this run" in stopped and "1 queued prompt(s)" in stopped
            assert fake.unconfirmed() == []  # every handled update was confirmed at the stop
            # The next process picks the queue up where it was.
            bot = _spindle(config, env, work, "run")
            wait_for(
                lambda: _transcript(fake, project, topic).count("echo (demo agent)") >= 2,
                60,
                "the queued prompt after the restart",
            )
            final = _transcript(fake, project, topic)
            assert "after the restart" in final.split("Spindle stopped this run")[1]
            assert "let me in" not in final  # never echoed back, never run
            assert list(fake.topics(project)) == [topic]  # no second topic after the restart
            log = (tmp_path / "data" / "spindle.log.jsonl").read_text()
            assert TOKEN not in log and TOKEN.split(":")[1] not in log
            thread = telegram_thread_id(project, topic)
            assert thread.startswith("tg:")
        finally:
            if bot.poll() is None:
                bot.send_signal(signal.SIGTERM)
                try:
                    bot.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    bot.kill()


def test_doctor_checks_the_telegram_token_at_the_configured_api(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with _telegram() as (fake, alice, _mallory, project):
        config = _config(tmp_path, work, fake, alice, project)
        good = _spindle(config, _env(tmp_path), work, "doctor")
        out, err = good.communicate(timeout=120)
        row = next(line for line in out.splitlines() if "telegram api" in line)
        assert "@" in row and fake.base_url in row, out + err
        assert "telegram access" in out and TOKEN not in out
        wrong = "123456789:" + "B" * 35
        bad = _spindle(config, _env(tmp_path, wrong), work, "doctor")
        out, err = bad.communicate(timeout=120)
        row = next(line for line in out.splitlines() if "telegram api" in line)
        assert "refused" in row, out + err
        assert wrong not in out
    # Nothing listening at the configured address: said so, without the token.
    config = _config(tmp_path, work, fake, alice, project)
    gone = _spindle(config, _env(tmp_path), work, "doctor")
    out, err = gone.communicate(timeout=120)
    row = next(line for line in out.splitlines() if "telegram api" in line)
    assert "unreachable" in row and TOKEN not in out, out + err


def test_a_malformed_telegram_token_is_one_line_and_exit_2(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with _telegram() as (fake, alice, _mallory, project):
        config = _config(tmp_path, work, fake, alice, project)
        run = _spindle(config, _env(tmp_path, "not-a-token"), work, "run")
        out, err = run.communicate(timeout=60)
    assert run.returncode == 2, out + err
    assert "telegram_token" in (out + err) and "@BotFather" in (out + err)
    assert "not-a-token" not in out + err

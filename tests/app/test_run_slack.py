"""``spindle run`` and ``spindle doctor`` with Slack tokens: the real commands, as processes,
against the fake Slack (Web API + Socket Mode) on 127.0.0.1, configured only through the
config file and the environment (``SPINDLE_SLACK_BOT_TOKEN``, ``SPINDLE_SLACK_APP_TOKEN``)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from threadspindle.testkit.fake_slack.server import APP_TOKEN, BOT_TOKEN, FakeSlack

ROOT = Path(__file__).resolve().parents[2]


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@contextmanager
def _slack() -> Iterator[tuple[FakeSlack, str, str, str]]:
    with FakeSlack() as fake:
        yield fake, fake.add_user("alice"), fake.add_user("mallory"), fake.add_channel("proj")


def _config(tmp_path: Path, work: Path, fake: FakeSlack, alice: str, project: str) -> Path:
    config = tmp_path / "spindle.toml"
    config.write_text(
        f"""
[runtime]
allowed_roots = ["{work}"]
default_agent = "echo"

[slack]
base_url = "{fake.base_url}"
allowed_user_ids = ["{alice}"]
min_edit_interval_s = 0.3

[slack.project_channels."{project}"]
agent = "echo"
workdir = "{work}"
"""
    )
    return config


def _env(tmp_path: Path, bot: str = BOT_TOKEN, app: str = APP_TOKEN) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "SPINDLE_DATA_DIR": str(tmp_path / "data"),
        "SPINDLE_SLACK_BOT_TOKEN": bot,
        "SPINDLE_SLACK_APP_TOKEN": app,
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


def _transcript(fake: FakeSlack, channel: str, thread_ts: str) -> str:
    return "\n".join(m.shown for m in fake.bot_messages(channel, thread_ts))


def test_spindle_run_serves_slack_and_keeps_the_queue_over_a_restart(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with _slack() as (fake, alice, mallory, project):
        config = _config(tmp_path, work, fake, alice, project)
        env = _env(tmp_path)
        bot = _spindle(config, env, work, "run")
        try:
            wait_for(lambda: fake.connections(), 60, "the Socket Mode connection")
            # A top-level message in the project channel: a thread running echo.
            ts = fake.send_message(project, alice, "hello from slack")
            wait_for(lambda: "echo (demo agent)" in _transcript(fake, project, ts), 30, "a footer")
            assert "hello from slack" in _transcript(fake, project, ts)
            # Someone not on the allow-list: nothing runs for them, only they are told.
            fake.send_message(project, mallory, "let me in", thread_ts=ts)
            wait_for(lambda: fake.ephemerals(mallory), 30, "the refusal")
            # A long prompt, then SIGTERM mid-run with a prompt queued behind it.
            fake.send_message(project, alice, " ".join(f"w{i}" for i in range(60)), thread_ts=ts)
            fake.send_message(project, alice, "after the restart. queue", thread_ts=ts)
            wait_for(lambda: "Queued (position 1)" in _transcript(fake, project, ts), 30, "queued")
            wait_for(lambda: "w0" in _transcript(fake, project, ts), 30, "streaming")
            bot.send_signal(signal.SIGTERM)
            _, err = bot.communicate(timeout=60)
            assert bot.returncode == 0, err
            assert BOT_TOKEN not in err and APP_TOKEN not in err
            stopped = _transcript(fake, project, ts)
            assert "Spindle stopped this run" in stopped and "1 queued prompt(s)" in stopped
            assert fake.unacked() == []  # every envelope handled was acknowledged
            # The next process picks the queue up where it was.
            bot = _spindle(config, env, work, "run")
            wait_for(
                lambda: _transcript(fake, project, ts).count("echo (demo agent)") >= 2,
                60,
                "the queued prompt after the restart",
            )
            final = _transcript(fake, project, ts)
            assert "after the restart" in final.split("Spindle stopped this run")[1]
            assert "let me in" not in final  # never echoed back, never run
            log = (tmp_path / "data" / "spindle.log.jsonl").read_text()
            assert BOT_TOKEN not in log and APP_TOKEN not in log
        finally:
            if bot.poll() is None:
                bot.send_signal(signal.SIGTERM)
                try:
                    bot.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    bot.kill()


def _row(out: str) -> str:
    return next(line for line in out.splitlines() if "slack api" in line)


def test_doctor_checks_the_slack_token_at_the_configured_api(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with _slack() as (fake, alice, _mallory, project):
        config = _config(tmp_path, work, fake, alice, project)
        good = _spindle(config, _env(tmp_path), work, "doctor")
        out, err = good.communicate(timeout=120)
        assert _row(out).startswith("OK") and fake.base_url in _row(out), out + err
        assert "slack access" in out and BOT_TOKEN not in out
        wrong = "xoxb-9999-9999-wrongtoken"
        bad = _spindle(config, _env(tmp_path, bot=wrong), work, "doctor")
        out, err = bad.communicate(timeout=120)
        assert "refused" in _row(out), out + err
        assert wrong not in out
        half = _env(tmp_path)
        del half["SPINDLE_SLACK_APP_TOKEN"]  # Socket Mode needs the app token too
        one = _spindle(config, half, work, "doctor")
        out, err = one.communicate(timeout=120)
        assert _row(out).startswith("FAIL") and "SPINDLE_SLACK_APP_TOKEN" in _row(out), out
    # Nothing listening at the configured address: said so, without the token.
    gone = _spindle(config, _env(tmp_path), work, "doctor")
    out, err = gone.communicate(timeout=120)
    assert "unreachable" in _row(out) and BOT_TOKEN not in out, out + err


def test_a_malformed_slack_token_is_one_line_and_exit_2(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with _slack() as (fake, alice, _mallory, project):
        config = _config(tmp_path, work, fake, alice, project)
        run = _spindle(config, _env(tmp_path, app="not-a-token"), work, "run")
        out, err = run.communicate(timeout=60)
    assert run.returncode == 2, out + err
    assert "slack_app_token" in (out + err) and "xapp-" in (out + err)
    assert "not-a-token" not in out + err


def test_a_token_slack_refuses_is_one_line_and_exit_2(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    wrong = "xoxb-9999-9999-wrongtoken"
    with _slack() as (fake, alice, _mallory, project):
        config = _config(tmp_path, work, fake, alice, project)
        run = _spindle(config, _env(tmp_path, bot=wrong), work, "run")
        out, err = run.communicate(timeout=60)
    assert run.returncode == 2, out + err
    assert "Slack refused the bot token (invalid_auth)" in out + err
    assert wrong not in out + err and "Traceback" not in out + err

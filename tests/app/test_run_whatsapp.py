"""``spindle run`` and ``spindle doctor`` with WhatsApp configured: the real commands, as
processes, against the fake WhatsApp Cloud API on 127.0.0.1 (signed deliveries into the
webhook, Graph API calls out), configured only through the config file and the environment
(``SPINDLE_WHATSAPP_TOKEN``, ``_APP_SECRET``, ``_VERIFY_TOKEN``)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from threadspindle.testkit.fake_whatsapp.server import (
    APP_SECRET,
    TOKEN,
    VERIFY_TOKEN,
    FakeWhatsApp,
)

ROOT = Path(__file__).resolve().parents[2]
ALICE, MALLORY = "15550001111", "15559998888"


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(tmp_path: Path, work: Path, fake: FakeWhatsApp, port: int) -> Path:
    config = tmp_path / "spindle.toml"
    config.write_text(
        f"""
[runtime]
allowed_roots = ["{work}"]
default_agent = "echo"

[whatsapp]
phone_number_id = "{fake.phone_id}"
base_url = "{fake.base_url}"
webhook_port = {port}
allowed_wa_ids = ["{ALICE}"]
min_message_interval_s = 0.3
"""
    )
    return config


def _env(tmp_path: Path, token: str = TOKEN) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "SPINDLE_DATA_DIR": str(tmp_path / "data"),
        "SPINDLE_WHATSAPP_TOKEN": token,
        "SPINDLE_WHATSAPP_APP_SECRET": APP_SECRET,
        "SPINDLE_WHATSAPP_VERIFY_TOKEN": VERIFY_TOKEN,
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


def _transcript(fake: FakeWhatsApp, chat: str) -> str:
    return "\n".join(m.text for m in fake.bot_messages(chat))


def _listening(url: str) -> bool:
    try:
        params = {"hub.mode": "subscribe", "hub.verify_token": VERIFY_TOKEN, "hub.challenge": "7"}
        return httpx.get(url, params=params, timeout=2).text == "7"
    except httpx.HTTPError:
        return False


def test_spindle_run_serves_whatsapp_and_keeps_the_queue_over_a_restart(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with FakeWhatsApp() as fake:
        fake.add_user(ALICE, "alice")
        fake.add_user(MALLORY, "mallory")
        port = _free_port()
        url = f"http://127.0.0.1:{port}/whatsapp/webhook"
        config = _config(tmp_path, work, fake, port)
        env = _env(tmp_path)
        bot = _spindle(config, env, work, "run")
        try:
            wait_for(lambda: _listening(url), 60, "the webhook's handshake")
            fake.webhook_url = url
            fake.say(ALICE, f"/echo start {work}")
            wait_for(lambda: "Started echo" in _transcript(fake, ALICE), 30, "the start")
            fake.say(ALICE, "hello from whatsapp")
            wait_for(lambda: "echo (demo agent)" in _transcript(fake, ALICE), 30, "a footer")
            assert "hello from whatsapp" in _transcript(fake, ALICE)
            # Someone not on the allow-list: told so in their own chat, nothing runs.
            fake.say(MALLORY, "let me in")
            wait_for(lambda: fake.bot_messages(MALLORY), 30, "the refusal")
            # A long prompt, then SIGTERM mid-run with a prompt queued behind it.
            fake.say(ALICE, " ".join(f"w{i}" for i in range(60)))
            fake.say(ALICE, "after the restart. queue")
            wait_for(lambda: "Queued (position 1)" in _transcript(fake, ALICE), 30, "queued")
            bot.send_signal(signal.SIGTERM)
            _, err = bot.communicate(timeout=60)
            assert bot.returncode == 0, err
            for secret in (TOKEN, APP_SECRET, VERIFY_TOKEN):
                assert secret not in err
            stopped = _transcript(fake, ALICE)
            assert "Spindle stopped this run" in stopped and "1 queued prompt(s)" in stopped
            assert all(d.done.is_set() for d in fake.deliveries)  # every one answered 200
            # The next process picks the queue up where it was.
            bot = _spindle(config, env, work, "run")
            wait_for(
                lambda: _transcript(fake, ALICE).count("echo (demo agent)") >= 2,
                60,
                "the queued prompt after the restart",
            )
            final = _transcript(fake, ALICE)
            assert "after the restart" in final.split("Spindle stopped this run")[1]
            assert "let me in" not in final + _transcript(fake, MALLORY)
            assert fake.reads  # read receipts went out
            log = (tmp_path / "data" / "spindle.log.jsonl").read_text()
            for secret in (TOKEN, APP_SECRET, VERIFY_TOKEN):
                assert secret not in log
        finally:
            fake.webhook_url = None
            if bot.poll() is None:
                bot.send_signal(signal.SIGTERM)
                try:
                    bot.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    bot.kill()


def test_doctor_checks_the_whatsapp_token_at_the_configured_api(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with FakeWhatsApp() as fake:
        config = _config(tmp_path, work, fake, _free_port())
        good = _spindle(config, _env(tmp_path), work, "doctor")
        out, err = good.communicate(timeout=120)
        row = next(line for line in out.splitlines() if "whatsapp api" in line)
        assert "555-078-3881" in row and fake.base_url in row, out + err
        assert "whatsapp access" in out and TOKEN not in out
        bad = _spindle(config, _env(tmp_path, "EAAwrong-token"), work, "doctor")
        out, err = bad.communicate(timeout=120)
        row = next(line for line in out.splitlines() if "whatsapp api" in line)
        assert "refused" in row, out + err
        assert "EAAwrong-token" not in out
    # Nothing listening at the configured address: said so, without the token.
    gone = _spindle(config, _env(tmp_path), work, "doctor")
    out, err = gone.communicate(timeout=120)
    row = next(line for line in out.splitlines() if "whatsapp api" in line)
    assert "unreachable" in row and TOKEN not in out, out + err


def test_a_missing_app_secret_is_one_line_and_exit_2(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with FakeWhatsApp() as fake:
        config = _config(tmp_path, work, fake, _free_port())
        env = _env(tmp_path)
        del env["SPINDLE_WHATSAPP_APP_SECRET"]
        run = _spindle(config, env, work, "run")
        out, err = run.communicate(timeout=60)
    assert run.returncode == 2, out + err
    assert "app_secret" in err and "whatsapp-setup.md" in err
    assert TOKEN not in out + err

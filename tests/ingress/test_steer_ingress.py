"""``/steer``, the `` steer`` suffix and the ``plain_message`` mode, as each ingress
(Discord, the text platforms' shared parser, the console) turns a message into an action,
and the configuration that sets the mode per channel."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from threadspindle.app.config import ConfigError, load_settings
from threadspindle.ingress.console import ConsoleChat
from threadspindle.ingress.discord import translate as discord
from threadspindle.ingress.discord.settings import settings_from_config
from threadspindle.ingress.slack.settings import slack_settings_from_config
from threadspindle.ingress.telegram import translate as telegram
from threadspindle.ingress.telegram.settings import telegram_settings_from_config
from threadspindle.ingress.thread_commands import typed_prompt
from threadspindle.runtime.core.actions import SteerCommand, UserMessage
from threadspindle.testkit.fake_slack.server import APP_TOKEN, BOT_TOKEN


def _discord(text: str, mode: discord.PlainMessageMode = "interrupt"):
    return discord.prompt_action(
        thread_id="t", message_id=7, author_id=1, author_name="ann", text=text, at=1.0, mode=mode
    )


def _typed(text: str, mode: discord.PlainMessageMode = "interrupt"):
    """Telegram, WhatsApp, Slack and the web chat: the shared parser."""
    common = {"thread_id": "t", "action_id": telegram.message_action_id(-100, 7), "at": 1.0}
    return typed_prompt(
        text, common, author_id="1", author_name="ann", source_message_id="7", mode=mode
    )


def _console(text: str, mode: discord.PlainMessageMode = "interrupt"):
    chat = ConsoleChat(
        runtime=None,  # type: ignore[arg-type]  # making an action needs no runtime
        out=io.StringIO(),
        default_agent="echo",
        default_workdir="/tmp",
        plain_message=mode,
    )
    return chat._prompt_action(text)


MAKERS = [_discord, _typed, _console]


def _kind(action: UserMessage | SteerCommand) -> str:
    if isinstance(action, SteerCommand):
        return "steer"
    return "interrupt" if action.interrupt else "queue"


@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize(
    ("text", "mode", "kind", "prompt"),
    [
        ("fix it", "interrupt", "interrupt", "fix it"),
        ("fix it steer", "interrupt", "steer", "fix it"),
        ("fix it. STEER ", "interrupt", "steer", "fix it."),
        ("fix it queue", "interrupt", "queue", "fix it"),
        ("fix it", "steer", "steer", "fix it"),
        ("fix it queue", "steer", "queue", "fix it"),  # a suffix wins over the mode
        ("fix it", "queue", "queue", "fix it"),
        ("fix it steer", "queue", "steer", "fix it"),
        ("steer", "interrupt", "interrupt", "steer"),  # the suffix alone is a prompt
        ("how do I steer?", "interrupt", "interrupt", "how do I steer?"),
    ],
)
def test_suffixes_and_the_plain_message_mode(make, text, mode, kind, prompt) -> None:
    action = make(text, mode)
    assert _kind(action) == kind and action.text == prompt


def test_the_discord_and_telegram_message_ids_carry_over_to_a_steer() -> None:
    assert _discord("x steer").action_id == discord.message_action_id(7)
    assert _typed("x steer").action_id == telegram.message_action_id(-100, 7)
    assert _discord("x steer").source_message_id == "7"
    assert not discord.is_queued(_discord("x steer")) and discord.is_queued(_discord("x queue"))


def test_the_mode_is_configured_per_channel(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPINDLE_DISCORD_TOKEN", "M" * 24 + ".abcdef.ghijklmnop")
    monkeypatch.setenv("SPINDLE_TELEGRAM_TOKEN", "123456789:" + "A" * 35)
    monkeypatch.setenv("SPINDLE_CONFIG", str(tmp_path / "none.toml"))
    config = load_settings(
        None,
        discord={
            "plain_message": "queue",
            "project_channels": {
                "42": {"workdir": "~", "plain_message": "steer", "shell_via_agent": True},
                "43": {"workdir": "~"},
            },
        },
        telegram={
            "plain_message": "steer",
            "project_groups": {"-100": {"workdir": "~", "shell_via_agent": False}},
        },
    )
    settings = settings_from_config(config)
    assert settings.plain_message_mode(42) == "steer"
    assert settings.plain_message_mode(43) == "queue"  # the bot's own
    assert settings.plain_message_mode(None) == "queue"
    # `!` in the agent's own shell, per project channel (None: the runtime's policy).
    assert (settings.shell_via_agent(42), settings.shell_via_agent(43)) == (True, None)
    assert config.workspaces.policy().shell_via_agent is False
    group = telegram_settings_from_config(config).project_group(-100)
    assert group is not None and group.shell_via_agent is False
    assert telegram_settings_from_config(config).plain_message == "steer"
    monkeypatch.setenv("SPINDLE_SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("SPINDLE_SLACK_APP_TOKEN", APP_TOKEN)
    slack = load_settings(None, slack={"plain_message": "steer"})
    assert slack_settings_from_config(slack).plain_message == "steer"
    with pytest.raises(ConfigError, match="plain_message"):
        load_settings(None, discord={"plain_message": "shout"})

"""The pure rules of Discord ingress: queue suffix, edits, workdirs, component ids, and
settings from the spindle configuration."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from threadspindle.app.config import ConfigError, load_settings
from threadspindle.effects.render import permission_action, question_menu_id
from threadspindle.ingress.discord import translate
from threadspindle.ingress.discord.settings import (
    DiscordSettings,
    ProjectChannel,
    settings_from_config,
)
from threadspindle.runtime.core.actions import SourceMessageDeleted, SourceMessageEdited


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("fix it. queue", ("fix it.", True)),
        ("fix it queue  ", ("fix it", True)),
        ("fix it QUEUE", ("fix it", True)),
        ("queue", ("queue", False)),  # the suffix alone is a prompt, not a convention
        ("what is a queue?", ("what is a queue?", False)),
        ("enqueue", ("enqueue", False)),
    ],
)
def test_queue_suffix(text: str, expected: tuple[str, bool]) -> None:
    assert translate.split_queue_suffix(text) == expected


def test_message_action_ids_are_stable_so_replays_are_dropped() -> None:
    one = translate.message_action(
        thread_id="t", message_id=7, author_id=1, author_name="a", text="x", at=1.0
    )
    again = translate.message_action(
        thread_id="t", message_id=7, author_id=1, author_name="a", text="x", at=2.0
    )
    assert one.action_id == again.action_id == "msg-7" and one.interrupt


def test_edits_update_and_withdrawing_the_suffix_deletes() -> None:
    common = {"thread_id": "t", "message_id": 9, "at": 1.0, "edit_stamp": "s"}
    kept = translate.edit_action(text="new text queue", was_queued=True, **common)
    assert isinstance(kept, SourceMessageEdited) and kept.text == "new text"
    gone = translate.edit_action(text="new text", was_queued=True, **common)
    assert isinstance(gone, SourceMessageDeleted) and gone.source_message_id == "9"
    plain = translate.edit_action(text="typo fixed", was_queued=False, **common)
    assert isinstance(plain, SourceMessageEdited) and plain.text == "typo fixed"


def test_workdirs_are_resolved_to_real_existing_directories(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert translate.resolve_workdir(str(tmp_path / "link")) == os.path.realpath(real)
    assert translate.resolve_workdir("real", base=str(tmp_path)) == os.path.realpath(real)
    assert translate.resolve_workdir(str(real / ".." / "real")) == os.path.realpath(real)
    assert translate.resolve_workdir(str(tmp_path / "missing")) is None
    (tmp_path / "file").write_text("x")
    assert translate.resolve_workdir(str(tmp_path / "file")) is None


def test_component_ids_round_trip_with_the_renderer() -> None:
    assert translate.parse_custom_id(permission_action("req:1", True)) == (
        "permission",
        ("req:1", "allow"),
    )
    assert translate.parse_custom_id(permission_action("r", False)) == ("permission", ("r", "deny"))
    assert translate.parse_custom_id(question_menu_id("q:9")) == ("question", ("q:9",))
    assert translate.parse_custom_id("remove_queued:msg-12") == ("remove_queued", ("msg-12",))
    assert translate.parse_custom_id("something:else") == ("", ())


def test_access_control_by_user_or_role() -> None:
    settings = DiscordSettings(token="t", allowed_user_ids=(1,), allowed_role_ids=(50,))
    assert settings.is_allowed(1, ())
    assert settings.is_allowed(2, (7, 50))
    assert not settings.is_allowed(2, (7,))
    assert not DiscordSettings(token="t").is_allowed(1, (50,))  # no list: nobody


def test_settings_from_the_spindle_configuration(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SPINDLE_DISCORD_TOKEN", "M" * 24 + ".abcdef.ghijklmnop")
    monkeypatch.setenv("SPINDLE_CONFIG", str(tmp_path / "none.toml"))  # no file: defaults
    config = load_settings(
        None,
        discord={
            "guild_ids": [10],
            "allowed_user_ids": [11],
            "rest_base_url": "http://127.0.0.1:8080/api/v10",
            "project_channels": {"42": {"agent": "codex", "workdir": "~/code/app"}},
        },
        runtime={"allowed_roots": ["~/code"]},
    )
    settings = settings_from_config(config)
    assert settings.token.startswith("MMMM") and settings.guild_ids == (10,)
    assert settings.rest_base_url == "http://127.0.0.1:8080/api/v10"
    assert settings.gateway_url == "wss://gateway.discord.gg/"
    project = settings.project_channel(42)
    assert project is not None and project.agent == "codex"
    assert settings.default_workdir == "~/code"


def test_a_project_channel_with_an_unknown_agent_is_refused_by_the_config(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[discord.project_channels."42"]\nagent = "cluade"\nworkdir = "~/code"\n')
    with pytest.raises(ConfigError) as refused:
        load_settings(config)
    text = str(refused.value)
    assert "discord.project_channels.42.agent" in text
    assert "unknown agent 'cluade'" in text and "claude, codex, gemini, opencode" in text
    with pytest.raises(ValueError, match="unknown agent 'cluade'"):
        ProjectChannel(channel_id=1, agent="cluade", workdir="/")
    with pytest.raises(ValueError, match="unknown agent 'bogus'"):
        DiscordSettings(token="t", agents=("claude", "bogus"))


def test_the_attachment_cap_comes_from_the_config(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[discord]\nattachment_max_mib = 2.5\n")
    settings = settings_from_config(
        load_settings(config, discord_token="M" * 24 + ".abcdef.ghijklmnop")
    )
    assert settings.attachment_max_bytes == int(2.5 * 1024 * 1024)
    config.write_text("[discord]\nattachment_max_mib = 0\n")
    with pytest.raises(ConfigError, match="discord.attachment_max_mib"):
        load_settings(config)


def test_resolving_a_workdir_never_raises(tmp_path: Path) -> None:
    for bad in ("a\0b", "~nobody\0/x", "x" * 5000, "/" + "a/" * 3000):
        assert translate.resolve_workdir(bad, str(tmp_path)) is None
        assert translate.complete_directory(bad, str(tmp_path)) == []

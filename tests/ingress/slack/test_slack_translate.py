"""``ingress.slack.translate``: Slack's happenings -> actions, pure; ids from Slack's own."""

from __future__ import annotations

from threadspindle.ingress.slack import translate
from threadspindle.runtime.core.actions import SourceMessageDeleted, SourceMessageEdited


def test_a_thread_is_a_slack_thread_and_a_top_level_message_is_none() -> None:
    assert translate.thread_of("C1", "1700000000.000100") == "sl:C1:1700000000.000100"
    assert translate.thread_of("C1", None) is None


def test_a_message_action_id_is_slacks_own() -> None:
    # A redelivered envelope names the same message: the same action id, dropped by the core.
    assert translate.message_action_id("C1", "2.000002") == "slm-C1-2.000002"


def test_edits_update_or_withdraw_by_the_previous_text() -> None:
    common = {"thread_id": "sl:C1:1.0", "channel": "C1", "ts": "2.0", "at": 1.0}
    edited = translate.edit_action(
        **common, text="b. queue", previous_text="a. queue", edit_ts="3.0"
    )
    assert isinstance(edited, SourceMessageEdited) and edited.text == "b."
    withdrawn = translate.edit_action(**common, text="b", previous_text="a. queue", edit_ts="4.0")
    assert isinstance(withdrawn, SourceMessageDeleted)
    assert edited.action_id != withdrawn.action_id
    deleted = translate.delete_action(**common)
    assert deleted.action_id == "sld-C1-2.0"


def test_commands_after_a_mention_of_the_app() -> None:
    assert translate.parse_mention_command("<@U0BOT> abort", "U0BOT") == translate.ParsedCommand(
        "abort", ""
    )
    parsed = translate.parse_mention_command("<@U0BOT|spindle>: clear_queue 2", "U0BOT")
    assert parsed == translate.ParsedCommand("clear-queue", "2")
    assert translate.parse_mention_command("<@U0BOT>", "U0BOT") == translate.ParsedCommand(
        "help", ""
    )
    assert translate.parse_mention_command("hi <@U0BOT> abort", "U0BOT") is None
    assert translate.parse_mention_command("<@U0OTHER> abort", "U0BOT") is None


def test_button_values_parse_as_the_renderer_made_them() -> None:
    assert translate.parse_callback("permission:allow:r1") == ("permission", "r1", "allow")
    assert translate.parse_callback("question:r2#3") == ("question", "r2", "3")
    assert translate.parse_callback("remove_queued:i9") == ("remove_queued", "i9", None)
    assert translate.parse_callback("anything") == ("", "", None)

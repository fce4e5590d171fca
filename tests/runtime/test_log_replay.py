"""Replay of recorded logs: golden files replay byte for byte, a live run's log replays to
exactly the chat effects the runtime applied, and bad or newer-format files are refused."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import trio
from runtime_harness import Chat, running, until

from threadspindle.runtime.core.effect_types import KEYED_POSTS
from threadspindle.runtime.live.replay import (
    FORMAT_VERSION,
    check,
    effect_lines,
    export_thread,
    read_jsonl,
    replay_actions,
    replay_file,
)

GOLDEN = Path(__file__).parent / "golden"
LOGS = sorted(p for p in GOLDEN.glob("*.jsonl") if not p.name.endswith(".effects.jsonl"))


def test_there_are_golden_logs() -> None:
    assert len(LOGS) >= 3


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_golden_log_replays_byte_for_byte(log: Path) -> None:
    expected = log.with_name(log.stem + ".effects.jsonl").read_bytes()
    got = ("\n".join(replay_file(log)) + "\n").encode()
    assert got == expected
    transcript = log.with_name(log.stem + ".transcript.txt").read_bytes()
    assert ("\n".join(replay_file(log, transcript=True)) + "\n").encode() == transcript
    assert check(log, log.with_name(log.stem + ".effects.jsonl")) == []


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_every_golden_line_carries_the_format_version(log: Path) -> None:
    for line in log.read_text().splitlines():
        record = json.loads(line)
        assert record["format"] == "spindle-log" and record["v"] == FORMAT_VERSION


def test_check_reports_a_difference(tmp_path: Path) -> None:
    log = GOLDEN / "text_tool.jsonl"
    expected = (GOLDEN / "text_tool.effects.jsonl").read_text().splitlines()
    expected[0] = expected[0].replace("start_agent", "stop_agent")
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text("\n".join(expected) + "\n")
    diff = check(log, wrong)
    assert any(line.startswith("-") and "stop_agent" in line for line in diff)
    assert any(line.startswith("+") and "start_agent" in line for line in diff)


def test_a_newer_format_version_is_refused(tmp_path: Path) -> None:
    line = json.loads((GOLDEN / "text_tool.jsonl").read_text().splitlines()[0])
    line["v"] = FORMAT_VERSION + 1
    newer = tmp_path / "newer.jsonl"
    newer.write_text(json.dumps(line) + "\n")
    with pytest.raises(ValueError, match="newer"):
        replay_file(newer)
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("not json\n")
    with pytest.raises(ValueError, match="garbage.jsonl:1"):
        replay_file(garbage)


def test_export_errors_name_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        export_thread(tmp_path / "none.sqlite3", "t1", io.StringIO())


async def test_a_live_log_replays_to_the_effects_the_runtime_applied(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with running(tmp_path) as rt:
        chat = Chat(rt, "live", str(tmp_path))
        await chat.start()
        await chat.say("TOOL first")
        await until(lambda: rt.snapshot("live").counters.completed == 1)
        await chat.say("SLOW second")
        await until(lambda: "chunk4" in "".join(rt.chat.texts("live", "text")))
        await chat.say("third interrupts")
        await until(lambda: rt.snapshot("live").counters.completed == 2)
        await rt.wait_quiet("live")
        applied = [e.model_dump(mode="json") for e in rt.chat.of_thread("live")]
        rt.log.flush()
        out = io.StringIO()
        count = export_thread(rt.log.path, "live", out)
        assert count == rt.log.last_seq("live")
        with pytest.raises(KeyError):
            export_thread(rt.log.path, "no-such-thread", io.StringIO())
    replayed = [
        json.loads(line)["effect"]
        for line in effect_lines(replay_actions(read_jsonl(out.getvalue().splitlines())))
    ]
    chat_types = {
        "post_output",
        "append_output",
        "edit_output",
        "seal_output",
        "typing",
        "show_permission",
        "show_question",
        "dismiss_prompt",
        "reply",
    }
    assert [e for e in replayed if e["type"] in chat_types] == applied
    assert len(
        {
            e["key"]
            for e in applied
            if e["type"] in {c.model_fields["type"].default for c in KEYED_POSTS}
        }
    ) == len(
        [
            e
            for e in applied
            if e["type"] in {"post_output", "show_permission", "show_question", "reply"}
        ]
    )

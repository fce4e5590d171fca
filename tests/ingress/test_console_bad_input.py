"""Bad input to the console, through a real ``spindle run`` fed by a pipe (issue 19.4):
each line that used to crash the whole program (exit 1, every thread down) is answered
with its reason and the chat goes on; unknown agents are refused up front and one recorded
in an old log is a notice, not a crash; agent output cannot drive the terminal."""

from __future__ import annotations

import re
from pathlib import Path

from test_console import echo_console, lines, spindle

from threadspindle.runtime.core.actions import ConversationStarted, PolicySet
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.live.log import EventLog

ESCAPES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def test_nul_paths_unicode_digits_and_bad_names_are_answered_not_fatal(place):
    out = echo_console(
        place,
        stdin=lines(
            "/workdir set a\0b",
            "/claude start a\0b",
            "/echo resume bad\0id",
            "/clear-queue ²",
            "/clear-queue three",
            "/model a\x01b",
            "/thread new a\0b",
            "/workdir set " + "x" * 5000,
            "still alive",
            "/wait",
            "/status",
            "/quit",
        ),
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.count("The workdir contains a NUL character") == 2
    assert "The session id contains a NUL character" in text
    assert text.count("The position must be a number") == 2
    assert "The model name contains a control character" in text
    assert "The thread name contains a NUL character" in text
    assert "The workdir is longer than 4096 bytes" in text
    assert "still alive" in text  # the echo agent answered the prompt after all that
    assert "Runs: 1 (completed 1" in text
    assert "Cleared" not in text  # a bad position never clears the whole queue
    assert "Traceback" not in out.stderr


def test_a_line_of_only_control_characters_is_no_prompt(place):
    """NULs or escape codes alone are as empty as a blank line: no run (before, the agent
    got an empty prompt)."""
    out = echo_console(
        place,
        stdin=lines("\0" * 50, "\x1b\x07", "/wait", "/status", "/quit"),
    )
    assert out.returncode == 0, out.stderr
    assert "Runs: 0 (completed 0" in out.stdout


def test_a_relative_workdir_is_taken_from_the_conversation_workdir(place, tmp_path):
    other = tmp_path / "other"
    (other / "sub").mkdir(parents=True)
    out = echo_console(
        place,
        args=(
            "--workdir",
            str(other),
        ),
        stdin=lines("/workdir set sub", "/workdir set ..", "/quit"),
    )
    assert out.returncode == 0, out.stderr
    # spindle runs in place["work"], which has no "sub": the conversation's workdir counts.
    assert f"Workdir set to {other / 'sub'} " in out.stdout
    assert f"Workdir set to {other} " in out.stdout


def test_paths_are_taken_as_typed_and_one_word_values_refuse_more(place, tmp_path):
    # Commands were split with shlex: a path's backslashes and double spaces were eaten
    # ("back\\slash" -> "backslash"), and a value of one word took the first of several
    # ("/model a b" set "a"), where the other platforms refuse the line.
    other = tmp_path / "other"
    for name in ("back\\slash", "sp  two", "it's"):
        (other / name).mkdir(parents=True)
    out = echo_console(
        place,
        args=("--workdir", str(other)),
        stdin=lines(
            "/workdir set back\\slash",
            f"/workdir set {other}",
            "/workdir set sp  two",
            f"/workdir set {other}",
            "/workdir set it's",
            "/model a b",
            "/thread new two words",
            "/echo resume",
            "/echo resume one two",
            "/allow p1 extra",
            "/threads",
            "/quit",
        ),
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for name in ("back\\slash", "sp  two", "it's"):
        assert f"Workdir set to {other / name} " in text
    assert "Model set" not in text and "usage: /model <name>" in text
    assert "usage: /thread new NAME | /thread switch NAME" in text
    assert text.count("usage: /echo resume <session id>") == 2
    assert "usage: /allow [id]" in text
    assert "two" not in [line.strip("* ").split(":")[0] for line in text.splitlines()]


def test_an_unknown_agent_is_refused_with_the_known_ones(place):
    out = spindle(place, "run", "--no-mcp", "--agent", "bogus", stdin=lines("hello"))
    assert out.returncode == 2
    assert "unknown agent 'bogus'" in out.stderr
    assert "claude, codex, gemini, opencode" in out.stderr


def test_an_unknown_agent_recorded_in_an_old_log_is_a_notice_not_a_crash(place):
    work = str(place["work"].resolve())
    place["data"].mkdir()
    with EventLog(place["data"] / "spindle.db") as log:
        base = {"thread_id": "console:main", "at": 1.0}
        log.append(PolicySet(**base, action_id="old-0", policy=Policy(allowed_roots=(work,))))
        log.append(
            ConversationStarted(
                **base,
                action_id="old-1",
                agent="bogus",
                requested_workdir=work,
                resolved_workdir=work,
            )
        )
        log.flush()
    out = echo_console(
        place,
        stdin=lines("hello", "/wait", "/echo start .", "hello again", "/wait", "/quit"),
    )
    assert out.returncode == 0, out.stderr
    assert "⚠ The agent could not take the prompt" in out.stdout
    assert "unknown agent 'bogus'" in out.stdout
    assert "hello again" in out.stdout and "echo (demo agent)" in out.stdout


def test_agent_output_cannot_drive_the_terminal(place):
    # The echo agent says back what it is told: a prompt full of escape sequences is what a
    # hostile agent would print.
    prompt = "look \x1b]0;pwned\x07 \x1b[2J\x1b[H here \x1b]52;c;ZXZpbA==\x1b\\ \x9b31m end"
    out = echo_console(place, stdin=lines(prompt, "/wait", "/quit"))
    assert out.returncode == 0, out.stderr
    assert "look" in out.stdout and "end" in out.stdout
    assert ESCAPES.search(out.stdout) is None, repr(out.stdout)
    assert ESCAPES.search(out.stderr) is None, repr(out.stderr)


def test_the_log_file_is_untouched_by_terminal_stripping(place: dict[str, Path]) -> None:
    """Only what reaches the terminal is cleaned: the event log keeps the prompt as typed."""
    out = echo_console(
        place,
        stdin=lines("raw \x1b[31mred", "/wait", "/quit"),
    )
    assert out.returncode == 0, out.stderr
    with EventLog(place["data"] / "spindle.db") as log:
        texts = [
            record.action.text
            for record in log.read("console:main")
            if record.action.kind == "user_message"
        ]
    assert texts == ["raw \x1b[31mred"]

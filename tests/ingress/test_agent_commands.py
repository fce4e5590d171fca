"""``/<agent> conversations | start | resume`` as the text-command platforms read them."""

from __future__ import annotations

from pathlib import Path

import pytest

from threadspindle.ingress.agent_commands import conversations_text, start_or_resume
from threadspindle.ingress.input_checks import InputRefused


def test_start_and_resume_give_the_session_and_the_workdir_asked_for(tmp_path: Path) -> None:
    default = str(tmp_path)
    assert start_or_resume("claude", "start", "", default, "/claude") == (None, default)
    assert start_or_resume("claude", "start", " ~/app ", default, "/claude") == (None, "~/app")
    assert start_or_resume("codex", "resume", "abc-1 ~/app", default, "codex") == (
        "abc-1",
        "~/app",
    )
    assert start_or_resume("codex", "resume", "abc-1", default, "codex") == ("abc-1", default)


@pytest.mark.parametrize(
    ("sub", "args", "why"),
    [
        ("resume", "", "usage: /claude resume <id> [workdir]"),
        ("stop", "", "usage: /claude start [workdir] | resume <id> | conversations"),
        ("resume", "a\x00b", "session id"),
        ("start", "bad\x00path", "The workdir contains a NUL character"),
    ],
)
def test_what_is_not_a_start_or_resume_is_refused(sub: str, args: str, why: str) -> None:
    with pytest.raises(InputRefused, match=why.replace("|", r"\|").replace("[", r"\[")):
        start_or_resume("claude", sub, args, "/home", "/claude")


def test_a_workdir_without_sessions_says_so(tmp_path: Path) -> None:
    empty = str(tmp_path / "nothing-here")
    assert conversations_text("claude", empty, "/claude resume <id>") == (
        f"No claude sessions found for {empty}."
    )

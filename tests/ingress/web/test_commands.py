"""``ingress.web.commands``: typed lines and pressed buttons -> actions, refusals with the
reason, and no value that cannot be one getting through."""

from __future__ import annotations

from pathlib import Path

import pytest

from threadspindle.ingress.input_checks import InputRefused
from threadspindle.ingress.web.commands import (
    WebIds,
    button_action,
    line_action,
    start_action,
)
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.model import Blocker, Conversation, QueueItem, ThreadState

T = "web:ab"


def _state(tmp_path: Path) -> ThreadState:
    item = QueueItem(id="q1", author_id="you", author_name="you", text="x", queued_at=0)
    blockers = (
        Blocker(request_id="p1", kind="permission", key="k1", run_id="r1", text="Bash"),
        Blocker(request_id="q9", kind="question", key="k2", run_id="r1", text="which?"),
    )
    return ThreadState.new(T).replace(
        conversation=Conversation(agent="echo", workdir=str(tmp_path)),
        queue=(item,),
        blockers=blockers,
    )


def test_lines(tmp_path: Path) -> None:
    state = _state(tmp_path)

    def line(text: str) -> A.Action:
        return line_action(state, T, "a1", 5.0, text)

    prompt = line("fix it")
    assert isinstance(prompt, A.UserMessage) and prompt.interrupt and prompt.text == "fix it"
    later = line("fix it later queue")
    assert isinstance(later, A.UserMessage) and not later.interrupt and later.text == "fix it later"
    queued = line("/queue one more")
    assert isinstance(queued, A.QueueCommand) and queued.text == "one more"
    assert isinstance(line("/abort"), A.AbortRequested)
    assert isinstance(line("/status"), A.StatusRequested)
    assert line("/clear-queue 2") == A.QueueCleared(thread_id=T, action_id="a1", at=5.0, position=2)
    assert isinstance(line("/model opus"), A.ModelChanged)
    assert isinstance(line("/conversation end"), A.ConversationEnded)
    steered = line("/steer and docs")
    assert isinstance(steered, A.SteerCommand) and steered.text == "and docs"
    assert isinstance(line("use it steer"), A.SteerCommand)
    assert isinstance(line("/btw why?"), A.ForkRequested)
    assert isinstance(line("!ls"), A.ShellRequested)
    (tmp_path / "sub").mkdir()
    moved = line("/workdir set sub")
    assert isinstance(moved, A.WorkdirSet) and moved.resolved_workdir == str(tmp_path / "sub")
    for bad, why in (
        ("/clear-queue ²", "position"),
        ("/model a b", "usage: /model"),
        ("/workdir set a\x00b", "NUL"),
        ("/nothing", "Unknown command"),
        ("/", "Type a command"),
        ("/help", "/steer <message>"),
        ("", "Type a prompt"),
        ("x" * 100_001, "at most"),
    ):
        with pytest.raises(InputRefused, match=why):
            line(bad)


def test_buttons(tmp_path: Path) -> None:
    state = _state(tmp_path)

    def press(action: str, answer: str | None = None) -> A.Action:
        return button_action(state, T, "a2", 6.0, action, answer)

    assert press("remove_queued:q1") == A.QueuedItemRemoved(
        thread_id=T, action_id="a2", at=6.0, item_id="q1"
    )
    allow = press("permission:allow:p1")
    assert isinstance(allow, A.PermissionAnswered) and allow.allow
    deny = press("permission:deny:p1")
    assert isinstance(deny, A.PermissionAnswered) and not deny.allow
    answered = press("question:q9", "the blue one")
    assert isinstance(answered, A.QuestionAnswered) and answered.answer == "the blue one"
    for action, answer, why in (
        ("remove_queued:nope", None, "no longer queued"),
        ("permission:allow:q9", None, "no longer pending"),  # q9 is a question
        ("question:q9", "  ", "answer is needed"),
        ("question:p1", "x", "no longer pending"),
        ("launch", None, "does nothing"),
    ):
        with pytest.raises(InputRefused, match=why):
            press(action, answer)
    with pytest.raises(InputRefused, match="no longer queued"):
        button_action(None, T, "a3", 7.0, "remove_queued:q1")


def test_starting(tmp_path: Path) -> None:
    ids = WebIds()
    thread = ids.thread_id()
    assert thread.startswith("web:") and thread != ids.thread_id()
    first, second = ids.action_id(), ids.action_id()
    assert first != second and first.startswith("web-")
    start = start_action(thread, first, 1.0, "echo", str(tmp_path), ("echo",))
    assert start.resolved_workdir == str(tmp_path) and start.agent == "echo"
    missing = start_action(thread, first, 1.0, "echo", str(tmp_path / "none"), ("echo",))
    assert missing.resolved_workdir is None  # the core answers that it does not exist
    with pytest.raises(InputRefused, match="Unknown agent"):
        start_action(thread, first, 1.0, "claude", str(tmp_path), ("echo",))

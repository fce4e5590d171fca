"""``ingress.thread_commands``: the one parser of typed thread commands and prompts."""

from __future__ import annotations

from pathlib import Path

import pytest

from threadspindle.ingress.input_checks import InputRefused
from threadspindle.ingress.thread_commands import (
    COMMANDS,
    NO_THREADS,
    Spelling,
    canonical,
    thread_action,
    typed_prompt,
)
from threadspindle.runtime.core import actions as A

COMMON = {"thread_id": "t", "action_id": "a1", "at": 5.0}
WHO = {"author_id": "u1", "author_name": "ann"}


def act(name: str, args: str = "", **kwargs: object) -> A.Action:
    return thread_action(name, args, COMMON, **WHO, source_message_id="m1", **kwargs)  # type: ignore[arg-type]


def test_every_listed_command_is_read(tmp_path: Path) -> None:
    samples = {
        "queue": "x",
        "steer": "x",
        "btw": "why?",
        "clear_queue": "2",
        "model": "opus",
        "workdir": "sub",
        "schedule": "list",
        "verbosity": "text",
        "shell": "ls",
        "worktree": "list",
    }
    for name, _, _ in COMMANDS:
        assert isinstance(act(name, samples.get(name, ""), workdir=str(tmp_path)), A.ActionBase)


def test_the_actions_and_their_fields(tmp_path: Path) -> None:
    steer = act("steer", "and docs")
    assert steer == A.SteerCommand(**COMMON, **WHO, text="and docs", source_message_id="m1")
    assert act("btw", "what is foo?") == A.ForkRequested(**COMMON, **WHO, question="what is foo?")
    assert act("fork") == A.ForkRequested(**COMMON, **WHO)
    assert act("compact") == A.CompactRequested(**COMMON, **WHO)
    diff = act("diff", "base")
    assert isinstance(diff, A.WorkspaceCommand) and diff.op == "diff" and diff.ref == "base"
    (tmp_path / "sub").mkdir()
    moved = act("workdir", "set sub", workdir=str(tmp_path))
    assert isinstance(moved, A.WorkdirSet) and moved.resolved_workdir == str(tmp_path / "sub")
    # Each platform's spellings of one command are one command.
    for name, args in (("clear-queue", ""), ("clear_queue", ""), ("CLEARQUEUE", "")):
        assert act(name, args) == A.QueueCleared(**COMMON)
    for name, args in (("end", ""), ("conversation_end", ""), ("conversation", "end")):
        assert isinstance(act(name, args), A.ConversationEnded)
    assert canonical("Worktree-New", "x") == ("worktree_new", "x")
    new = act("worktree_new", "feature")  # Telegram's /worktree_new
    assert isinstance(new, A.WorkspaceCommand) and new.op == "worktree_new"


def test_refusals_are_spelled_as_the_platform_spells_commands() -> None:
    slack = Spelling("@Spindle ", "-")
    for name, args, why in (
        ("steer", "", "usage: @Spindle steer <message>"),
        ("btw", "", "usage: @Spindle btw <question>"),
        ("clear-queue", "1 2", "usage: @Spindle clear-queue"),
        ("model", "a b", "usage: @Spindle model <name>"),
        ("nothing", "", "Unknown command @Spindle nothing .try @Spindle help"),
        ("diff", "x", "usage: /diff"),
    ):
        with pytest.raises(InputRefused, match=why):
            act(name, args, spelling=slack)
    with pytest.raises(InputRefused, match="usage: /clear_queue"):
        act("clear-queue", "1 2")
    for name in ("fork", "btw"):  # a chat without threads: refused before the core
        with pytest.raises(InputRefused) as refused:
            act(name, "why?", has_threads=False)
        assert str(refused.value) == NO_THREADS


def test_prompts_by_suffix_and_mode() -> None:
    def typed(text: str, mode: str = "interrupt") -> A.Action:
        return typed_prompt(text, COMMON, **WHO, mode=mode)  # type: ignore[arg-type]

    plain = typed("fix it")
    assert isinstance(plain, A.UserMessage) and plain.interrupt and plain.text == "fix it"
    queued = typed("fix it. queue")
    assert isinstance(queued, A.UserMessage) and not queued.interrupt and queued.text == "fix it."
    steered = typed("use the new API steer")
    assert isinstance(steered, A.SteerCommand) and steered.text == "use the new API"
    assert isinstance(typed("fix it", "steer"), A.SteerCommand)
    assert isinstance(typed("fix it. queue", "steer"), A.UserMessage)  # the suffix wins
    by_mode = typed("fix it", "queue")
    assert isinstance(by_mode, A.UserMessage) and not by_mode.interrupt
    shell = typed("!git status")
    assert isinstance(shell, A.ShellRequested) and shell.command == "git status"

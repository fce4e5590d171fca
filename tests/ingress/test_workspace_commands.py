"""The workspace commands as typed (``ingress.workspace_commands``), and through the real
console: `!` runs in the workdir for an allowed user, /undo restores the files of before
the last run."""

from __future__ import annotations

import subprocess

import pytest
from test_console import lines, spindle

from threadspindle.ingress.input_checks import InputRefused
from threadspindle.ingress.workspace_commands import shell_action, workspace_action
from threadspindle.runtime.core import actions as A

COMMON = {"thread_id": "t1", "action_id": "a1", "at": 1.0}


def parse(name: str, args: str = ""):
    return workspace_action(name, args, COMMON, "u1", "alice")


def test_shell_messages_and_the_shell_command():
    action = shell_action("!  ls -la  ", COMMON, "u1", "alice")
    assert isinstance(action, A.ShellRequested)
    assert (action.command, action.author_id) == ("ls -la", "u1")
    assert shell_action("no bang", COMMON, "u1") is None
    assert shell_action("!", COMMON, "u1") is None  # a lone "!" is a prompt
    assert action.via_agent is None  # the runtime's policy decides
    assert shell_action("!ls", COMMON, "u1", via_agent=True).via_agent is True  # the channel's
    assert parse("shell", "make test").command == "make test"
    with pytest.raises(InputRefused):
        parse("shell", "  ")
    with pytest.raises(InputRefused):
        shell_action("!" + "x" * 5000, COMMON, "u1")


def test_undo_redo_diff():
    assert parse("undo").op == "undo" and parse("REDO").op == "redo"
    assert parse("diff").ref is None and parse("diff", "base").ref == "base"
    for name, args in (("undo", "x"), ("diff", "foo")):
        with pytest.raises(InputRefused):
            parse(name, args)
    assert parse("status") is None  # not a workspace command


def test_worktree_forms():
    new = parse("worktree", "new feat-1 develop")
    assert (new.op, new.name, new.ref) == ("worktree_new", "feat-1", "develop")
    assert parse("worktree_new", "feat").name == "feat"  # Telegram's form
    assert parse("worktree", "list").op == "worktree_list"
    remove = parse("worktree", "remove feat force")
    assert (remove.op, remove.name, remove.force) == ("worktree_remove", "feat", True)
    assert parse("worktree", "remove feat").force is False
    merge = parse("worktree", "merge")
    assert (merge.op, merge.ref) == ("worktree_merge", None)
    assert parse("worktree", "merge release").ref == "release"
    for args in ("", "new", "new ../x", "new .hidden", "new a b c", "remove", "frob", "list x"):
        with pytest.raises(InputRefused):
            parse("worktree", args)


def git(work, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "T",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "T",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(
        ["git", *args], cwd=work, env=env, check=True, capture_output=True, text=True
    ).stdout


def test_console_shell_and_undo_end_to_end(place):
    work = place["work"]
    git(work, "init", "-q", "-b", "main")
    (work / "README.md").write_text("original\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "init")
    place["config"].write_text('[workspaces]\nshell_users = ["you"]\n')
    out = spindle(
        place,
        "run",
        "--no-mcp",
        stdin=lines(
            "hello",
            "/wait",
            "!echo changed > README.md; echo made > new.txt; echo shell-said-hi",
            "/wait",
            "/undo",
            "/wait",
            "/quit",
        ),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "shell-said-hi" in out.stdout and "→ exit 0" in out.stdout
    assert "Undid run r1" in out.stdout
    assert (work / "README.md").read_text() == "original\n"
    assert not (work / "new.txt").exists()
    assert git(work, "for-each-ref", "--format=%(refname)", "refs/spindle/").split() == [
        "refs/spindle/console_main/r1",
        "refs/spindle/console_main/r1-undone",
    ]
    assert git(work, "status", "--porcelain") == ""


def test_console_refuses_shell_for_users_not_allowed(place):
    out = spindle(place, "run", "--no-mcp", stdin=lines("!touch x", "/wait", "/quit"))
    assert out.returncode == 0, out.stderr
    assert "Shell commands are not enabled for you" in out.stdout
    assert not (place["work"] / "x").exists()

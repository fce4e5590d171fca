"""Checkpoints, restore (undo/redo), diffs and worktrees with real git in temporary
repositories: the user's branch, index, stash and HEAD are never touched."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import trio
from git_repo import git, make_repo, tree_of
from hypothesis import given, settings
from hypothesis import strategies as st

from threadspindle.effects import git_workspace as gw
from threadspindle.effects import git_worktrees as gwt


def run(fn, *args, **kwargs):
    return trio.run(lambda: fn(*args, **kwargs))


def user_view(repo: Path) -> tuple[str, str, str, str]:
    """What the user's git shows: HEAD, the index's tree, status, stash list."""
    return (
        git(repo, "rev-parse", "HEAD"),
        git(repo, "write-tree"),
        git(repo, "status", "--porcelain"),
        git(repo, "stash", "list"),
    )


def test_checkpoint_undo_redo_created_edited_deleted_and_user_uncommitted(tmp_path):
    repo = make_repo(tmp_path / "r", {"a.txt": "a\n", "b.txt": "b\n", "dir/c.txt": "c\n"})
    # The user has uncommitted work before the run: an edit, a staged file, an untracked one.
    (repo / "a.txt").write_text("a edited by the user\n")
    (repo / "staged.txt").write_text("staged\n")
    git(repo, "add", "staged.txt")
    (repo / "notes.txt").write_text("untracked notes\n")
    (repo / "build.log").write_text("ignored\n")
    git(repo, "stash", "list")
    before = tree_of(repo)
    view = user_view(repo)

    commit, ref = run(gw.checkpoint, str(repo), "discord:123/x", "r1")
    assert ref == "refs/spindle/discord_123_x/r1"
    assert git(repo, "rev-parse", ref) == commit
    assert user_view(repo) == view  # nothing of the user's changed

    # The "agent" creates, edits and deletes files (the user's edited one too).
    (repo / "new.py").write_text("print('new')\n")
    (repo / "a.txt").write_text("a rewritten by the agent\n")
    (repo / "b.txt").unlink()
    (repo / "dir" / "c.txt").unlink()
    (repo / "notes.txt").write_text("notes changed by the agent\n")
    after_run = tree_of(repo)

    saved, files = run(gw.restore, str(repo), commit, save_ref=gw.ref_for("t", "r1-undone"))
    assert tree_of(repo) == before  # including the user's uncommitted edit and the ignored file
    assert set(files) == {"new.py", "a.txt", "b.txt", "dir/c.txt", "notes.txt"}
    assert git(repo, "rev-parse", "refs/spindle/t/r1-undone") == saved
    assert user_view(repo) == view

    _, redone = run(gw.restore, str(repo), saved)
    assert tree_of(repo) == after_run
    assert set(redone) == set(files)
    head, index, _, stash = user_view(repo)
    assert (head, index, stash) == view[:2] + view[3:]


def test_checkpoint_outside_a_repository_fails_clearly(tmp_path):
    with pytest.raises(gw.GitError, match="not inside a git repository"):
        run(gw.checkpoint, str(tmp_path), "t", "r1")


def test_diff_text_binary_and_renamed(tmp_path):
    repo = make_repo(
        tmp_path / "r",
        {"text.txt": "one\ntwo\nthree\n", "old_name.md": "".join(f"line {i}\n" for i in range(40))},
    )
    (repo / "pic.bin").write_bytes(b"\x00\x01\x02" * 10)
    git(repo, "add", "pic.bin")
    git(repo, "commit", "-q", "-m", "binary")
    base, _ = run(gw.checkpoint, str(repo), "t", "r1")
    (repo / "text.txt").write_text("one\nTWO\nthree\nfour\n")
    (repo / "pic.bin").write_bytes(b"\x00\x09\x09" * 12)
    (repo / "old_name.md").rename(repo / "new_name.md")
    summary = run(gw.diff, str(repo), base)
    files = {f[0]: f[1:] for f in summary.files}
    assert files["text.txt"] == (2, 1, False)
    assert files["pic.bin"] == (0, 0, True)
    assert files["old_name.md → new_name.md"] == (0, 0, False)
    assert summary.line() == "3 files +2 −1"
    assert "rename from old_name.md" in summary.patch
    assert "Binary files" in summary.patch
    assert "+TWO" in summary.patch


def test_git_output_is_read_up_to_its_cap_and_git_stopped_there(tmp_path):
    repo = make_repo(tmp_path / "r")
    (repo / "big.txt").write_text(("z" * 99 + "\n") * 100_000)  # 10 MB
    base, _ = run(gw.checkpoint, str(repo), "t", "r1")
    (repo / "big.txt").write_text("changed\n")
    head = run(gw.snapshot, str(repo), "now")
    cut = run(gw._git, str(repo), "diff", base, head, max_out=4096, cut_ok=True)
    assert cut.cut and len(cut.out) == 4096 and cut.out.startswith(b"diff --git a/big.txt")
    with pytest.raises(gw.GitError, match="its output passed 4,096 bytes"):
        run(gw._git, str(repo), "diff", base, head, max_out=4096)
    whole = run(gw._git, str(repo), "diff", base, head)
    assert not whole.cut and len(whole.out) > 10_000_000
    # Stdin still goes in, and a failure still says git's own words.
    expected = (
        subprocess.run(
            ["git", "hash-object", "--stdin"], input=b"x\n", capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )
    assert run(gw._git, str(repo), "hash-object", "--stdin", stdin=b"x\n").text == expected
    with pytest.raises(gw.GitError, match="rev-parse --verify: fatal: Needed a single revision"):
        run(gw._git, str(repo), "rev-parse", "--verify", "not-a-ref^{commit}")


def test_a_diff_of_more_files_than_it_lists_counts_them_all(tmp_path, monkeypatch):
    repo = make_repo(tmp_path / "r")
    base, _ = run(gw.checkpoint, str(repo), "t", "r1")
    for i in range(300):
        (repo / f"file_{i:03}.txt").write_text("a\nb\n")
    (repo / "README.md").write_text("gone\n")
    monkeypatch.setattr(gw, "NUMSTAT_MAX_BYTES", 1000)  # ~50 of the 301 entries
    summary = run(gw.diff, str(repo), base, patch=False)
    assert summary.files_cut and 10 < len(summary.files) < 300
    assert summary.line() == "301 files +601 −1"
    names = [f[0] for f in summary.files]
    assert all(n == "README.md" or re.fullmatch(r"file_\d{3}\.txt", n) for n in names)
    assert summary.table().endswith(f"… and {301 - 30} more")


def test_prune_keeps_the_newest_and_drops_old_ones(tmp_path):
    repo = make_repo(tmp_path / "r")
    for i in range(5):
        (repo / "f.txt").write_text(f"{i}\n")
        run(gw.checkpoint, str(repo), "t", f"r{i}")
    deleted = run(gw.prune_checkpoints, str(repo), "t", keep=2, max_age_s=3600)
    assert len(deleted) == 3
    left = git(repo, "for-each-ref", "--format=%(refname)", "refs/spindle/t/").splitlines()
    assert len(left) == 2
    deleted = run(gw.prune_checkpoints, str(repo), "t", keep=10, max_age_s=-1)
    assert git(repo, "for-each-ref", "refs/spindle/t/") == ""


def test_worktrees_made_removed_and_merged_at_once_in_one_repository_all_succeed(tmp_path):
    # Threads of one repository each making a worktree at the same moment: `git worktree
    # add` read the admin folder another was still making ("failed to read
    # .git/worktrees/<name>/commondir"), in 1-3 of 8 on this machine, and a thread's
    # /worktree new failed.
    repo = make_repo(tmp_path / "proj", {"shared.txt": "base\n"})
    names = [f"w{n}" for n in range(8)]

    async def each(operation, arguments) -> None:
        async with trio.open_nursery() as nursery:
            for name in names:
                nursery.start_soon(operation, *arguments(name))

    async def main() -> None:
        await each(gwt.worktree_new, lambda name: (str(repo), name, None))
        for name in names:
            Path(tmp_path / "proj.worktrees" / name, f"{name}.txt").write_text(name)
        await each(gwt.worktree_merge, lambda name: (str(tmp_path / "proj.worktrees" / name), None))
        await each(lambda *a: gwt.worktree_remove(*a, force=False), lambda name: (str(repo), name))

    trio.run(main)
    assert sorted(p.name for p in repo.iterdir() if p.name.startswith("w")) == [
        f"{name}.txt" for name in names
    ]  # every worktree's file, merged into main
    assert not (tmp_path / "proj.worktrees").exists() or not any(
        (tmp_path / "proj.worktrees").iterdir()
    )


def test_two_worktrees_edit_the_same_file_without_interfering(tmp_path):
    repo = make_repo(tmp_path / "proj", {"shared.txt": "base\n"})
    one, branch_one, base = run(gwt.worktree_new, str(repo), "one", None)
    two, _, _ = run(gwt.worktree_new, str(repo), "two", None)
    assert base == "main" and branch_one == "spindle/one"
    assert Path(one).parent == tmp_path / "proj.worktrees"
    Path(one, "shared.txt").write_text("from one\n")
    Path(two, "shared.txt").write_text("from two\n")
    assert (repo / "shared.txt").read_text() == "base\n"
    assert Path(one, "shared.txt").read_text() == "from one\n"
    # Checkpoints and undo in one worktree leave the other alone.
    c1, _ = run(gw.checkpoint, one, "thread-one", "r1")
    Path(one, "shared.txt").write_text("one again\n")
    run(gw.restore, one, c1)
    assert Path(one, "shared.txt").read_text() == "from one\n"
    assert Path(two, "shared.txt").read_text() == "from two\n"
    listed = dict((b, p) for p, b in run(gwt.worktree_list, str(repo)))
    assert listed["spindle/one"] == one and listed["spindle/two"] == two


def test_merge_without_conflict_fast_forwards_the_target(tmp_path):
    repo = make_repo(tmp_path / "proj", {"a.txt": "a\n", "b.txt": "b\n"})
    wt, _, _ = run(gwt.worktree_new, str(repo), "feat", None)
    Path(wt, "a.txt").write_text("a changed in the worktree\n")  # left uncommitted
    (repo / "b.txt").write_text("b changed on main\n")
    git(repo, "commit", "-qam", "main moves on")
    result = run(gwt.worktree_merge, wt, None)
    assert result.ok, result.text
    assert "pending changes committed" in result.text
    assert git(repo, "rev-parse", "main") == git(wt, "rev-parse", "HEAD")
    assert (repo / "a.txt").read_text() == "a changed in the worktree\n"  # main's tree updated
    assert (repo / "b.txt").read_text() == "b changed on main\n"


def test_merge_with_conflict_reports_files_and_keeps_both_sides(tmp_path):
    repo = make_repo(tmp_path / "proj", {"a.txt": "a\n"})
    wt, _, _ = run(gwt.worktree_new, str(repo), "feat", None)
    Path(wt, "a.txt").write_text("a from the worktree\n")
    (repo / "a.txt").write_text("a from main\n")
    git(repo, "commit", "-qam", "main edits a")
    main_before = git(repo, "rev-parse", "main")
    result = run(gwt.worktree_merge, wt, "main")
    assert not result.ok
    assert result.conflicts == ["a.txt"]
    assert "a.txt" in result.text
    assert git(repo, "rev-parse", "main") == main_before
    assert (repo / "a.txt").read_text() == "a from main\n"
    assert Path(wt, "a.txt").read_text() == "a from the worktree\n"  # committed, not lost
    assert git(wt, "status", "--porcelain") == ""
    assert git(wt, "log", "-1", "--format=%s") == "spindle/feat: pending changes"
    assert not Path(git(wt, "rev-parse", "--git-dir"), "rebase-merge").exists()


def test_remove_refuses_uncommitted_changes_unless_forced(tmp_path):
    repo = make_repo(tmp_path / "proj")
    wt, _, _ = run(gwt.worktree_new, str(repo), "tmp1", None)
    Path(wt, "scratch.txt").write_text("work\n")
    with pytest.raises(gw.GitError, match="uncommitted changes"):
        run(gwt.worktree_remove, str(repo), "tmp1", force=False)
    assert Path(wt).exists()
    run(gwt.worktree_remove, str(repo), "tmp1", force=True)
    assert not Path(wt).exists()
    assert git(repo, "rev-parse", "--verify", "spindle/tmp1")  # the branch stays


def test_bad_worktree_names_are_refused(tmp_path):
    repo = make_repo(tmp_path / "proj")
    for name in ("../x", "a/b", "-x", "x.lock", ""):
        with pytest.raises(gw.GitError):
            run(gwt.worktree_new, str(repo), name, None)


def test_refs_git_would_read_as_options_are_refused(tmp_path):
    """A base, target or diff base comes from the chat: ``--exec=…`` would make ``git
    rebase`` run a shell command for a user who is not on the shell allow-list."""
    repo = make_repo(tmp_path / "proj", {"a.txt": "a\n"})
    wt, _, _ = run(gwt.worktree_new, str(repo), "feat", None)
    Path(wt, "a.txt").write_text("pending\n")
    pwned = tmp_path / "pwned"
    for ref in (f"--exec=touch{chr(36)}{{IFS}}{pwned}", "-x", "a b", ""):
        with pytest.raises(gw.GitError, match="not a usable target branch"):
            run(gwt.worktree_merge, wt, ref)
        with pytest.raises(gw.GitError, match="not a usable base branch"):
            run(gwt.worktree_new, str(repo), "other", ref)
        with pytest.raises(gw.GitError, match="not a usable diff base"):
            run(gw.merge_base, str(repo), ref)
    assert not pwned.exists()
    assert git(wt, "status", "--porcelain") != ""  # nothing was committed for the refusal
    assert not Path(tmp_path / "proj.worktrees" / "other").exists()


@settings(max_examples=150, deadline=None)
@given(thread_id=st.text(max_size=40), run_id=st.text(max_size=12))
def test_every_thread_and_run_id_makes_a_ref_git_accepts(thread_id: str, run_id: str) -> None:
    """A console thread may be named ``../x`` or ``x.lock``: its checkpoint ref must still
    be one git takes (before, such a name made every checkpoint of the thread fail)."""
    ref = gw.ref_for(thread_id, run_id)
    checked = subprocess.run(["git", "check-ref-format", ref], capture_output=True)
    assert checked.returncode == 0, ref


def test_a_thread_named_like_a_path_is_checkpointed(tmp_path):
    repo = make_repo(tmp_path / "r", {"a.txt": "a\n"})
    commit, ref = run(gw.checkpoint, str(repo), "console:../../x.lock", "r1")
    assert git(repo, "rev-parse", ref) == commit
    # The ids that were valid keep their refs (checkpoints made before still resolve).
    assert gw.ref_for("discord:123/x", "r1") == "refs/spindle/discord_123_x/r1"
    assert gw.ref_for("tg:-100:5", "r2") == "refs/spindle/tg_-100_5/r2"

"""effects/git_workspace.py against a repository an agent configured: what git runs for it
(filters, ``core.fsmonitor``, hooks) gets none of Spindle's secrets, and, when the agents
are sandboxed, runs in their sandbox (real bubblewrap, as `make test` unpacks it)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import trio
from git_repo import git, make_repo, tree_of

from threadspindle.effects import git_workspace as gw
from threadspindle.effects import git_worktrees as gwt
from threadspindle.effects.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[2]
BWRAP = ROOT / ".tools" / "bubblewrap" / "usr" / "bin" / "bwrap"
SECRET = "the-bot-token-value"


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    assert BWRAP.exists(), "run `make test` (it unpacks Debian's bubblewrap in .tools/)"
    monkeypatch.setenv("SPINDLE_DISCORD_TOKEN", SECRET)
    found = {
        "roots": tmp_path / "roots",
        "data": tmp_path / "data",
        "outside": tmp_path / "outside",
    }
    for path in found.values():
        path.mkdir()
    (found["data"] / "spindle.db").write_text("every thread's conversation")
    return found


def sandbox_of(places: dict[str, Path]) -> Sandbox:
    return Sandbox(binary=str(BWRAP), hidden=(str(places["data"]),), roots=(str(places["roots"]),))


def run_confined(sandbox: Sandbox | None, workdir: Path, fn, *args, **kwargs):
    async def main():
        with gw.confined(sandbox, str(workdir)):
            return await fn(*args, **kwargs)

    return trio.run(main)


def plant(repo: Path, places: dict[str, Path]) -> None:
    """What a hostile agent writes in its repository: a clean filter for every file, an
    fsmonitor and a reference-transaction hook, each leaving the environment and the data
    dir's listing where it can read them, and trying to write outside its workdir."""
    outside = places["outside"]
    spy = (
        f"env > {repo}/.leak-$1; ls {places['data']} >> {repo}/.leak-$1; "
        f"echo escaped > {outside}/$1; true"
    )
    (repo / ".spy.sh").write_text(f"#!/bin/sh\n{spy}\n")
    (repo / ".spy.sh").chmod(0o755)
    git(repo, "config", "filter.pwn.clean", f"sh -c '{repo}/.spy.sh filter >/dev/null 2>&1; cat'")
    git(repo, "config", "core.fsmonitor", f"{repo}/.spy.sh fsmonitor")
    hooks = repo / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "reference-transaction").write_text(f"#!/bin/sh\n{repo}/.spy.sh hook\n")
    (hooks / "reference-transaction").chmod(0o755)
    (repo / ".gitattributes").write_text("* filter=pwn\n")


def leaks(repo: Path) -> str:
    return "".join(p.read_text() for p in repo.glob(".leak-*"))


def test_a_repository_the_agent_configured_runs_in_its_sandbox(places):
    repo = make_repo(places["roots"] / "mine", {"a.txt": "a\n"})
    plant(repo, places)
    (repo / "a.txt").write_text("changed by the agent\n")
    commit, ref = run_confined(
        sandbox_of(places), repo, gw.checkpoint, str(repo), "console:main", "r1"
    )
    assert git(repo, "rev-parse", ref) == commit  # the checkpoint itself works
    seen = leaks(repo)
    assert "filter" in {p.name.split("-")[-1] for p in repo.glob(".leak-*")}  # it did run
    assert SECRET not in seen
    assert "spindle.db" not in seen  # the data dir is empty in the sandbox
    assert list(places["outside"].iterdir()) == []  # nothing written outside the workdir


def test_unconfined_git_never_carries_spindles_secrets(places):
    repo = make_repo(places["roots"] / "mine", {"a.txt": "a\n"})
    plant(repo, places)
    (repo / "a.txt").write_text("changed\n")
    run_confined(None, repo, gw.checkpoint, str(repo), "console:main", "r1")
    seen = leaks(repo)
    assert "PATH=" in seen  # the filter ran, with an environment
    assert SECRET not in seen and "SPINDLE_" not in seen


def test_confined_checkpoint_diff_and_undo_in_a_folder_of_a_repository(places):
    repo = make_repo(places["roots"] / "repo", {"app/a.txt": "a\n", "other.txt": "o\n"})
    workdir = repo / "app"
    commit, _ = run_confined(
        sandbox_of(places), workdir, gw.checkpoint, str(workdir), "console:main", "r1"
    )
    before = tree_of(repo)
    (workdir / "a.txt").write_text("changed\n")
    summary = run_confined(sandbox_of(places), workdir, gw.diff, str(workdir), commit)
    assert [f[0] for f in summary.files] == ["app/a.txt"]
    run_confined(sandbox_of(places), workdir, gw.restore, str(workdir), commit)
    assert tree_of(repo) == before


def test_confined_worktrees_new_checkpoint_and_merge(places):
    main = make_repo(places["roots"] / "proj", {"a.txt": "a\n"})
    sandbox = sandbox_of(places)
    path, branch, _ = run_confined(sandbox, main, gwt.worktree_new, str(main), "feature", None)
    assert branch == "spindle/feature" and Path(path).parent.name == "proj.worktrees"
    worktree = Path(path)
    (worktree / "b.txt").write_text("b\n")
    commit, ref = run_confined(
        sandbox, worktree, gw.checkpoint, str(worktree), "console:feature", "r1"
    )
    assert git(main, "rev-parse", ref) == commit
    result = run_confined(sandbox, worktree, gwt.worktree_merge, str(worktree), None)
    assert result.ok, result.text
    assert git(main, "show", "main:b.txt") == "b"


def test_a_git_pointer_the_agent_planted_is_not_followed(places):
    victim = make_repo(places["roots"] / "victim", {"secret.txt": "victim's work\n"})
    refs_before = git(victim, "for-each-ref")
    mine = places["roots"] / "mine"
    mine.mkdir()
    # A worktree's pointer to the other thread's repository, written by the agent.
    (mine / ".git").write_text(f"gitdir: {victim}/.git\n")
    with pytest.raises(gw.GitError):
        run_confined(sandbox_of(places), mine, gw.checkpoint, str(mine), "console:main", "r1")
    assert git(victim, "for-each-ref") == refs_before
    assert not (mine / "secret.txt").exists()


def test_an_index_the_agent_made_a_symlink_is_not_read(places, tmp_path):
    repo = make_repo(places["roots"] / "mine", {"a.txt": "a\n"})
    index = repo / ".git" / "index"
    index.unlink()
    index.symlink_to(places["data"] / "spindle.db")
    commit, _ = run_confined(
        sandbox_of(places), repo, gw.checkpoint, str(repo), "console:main", "r1"
    )
    assert git(repo, "show", f"{commit}:a.txt") == "a"  # read from HEAD instead


def test_undo_does_not_follow_a_folder_replaced_by_a_symlink(tmp_path):
    # The agent replaces its folder `a` (holding a file a/src) with a link to another
    # thread's workdir, git-ignored so the snapshot leaves it out: /undo must put a/src
    # back in this workdir and remove nothing through the link.
    victim = tmp_path / "victim"
    (victim / "src").mkdir(parents=True)
    (victim / "src" / "precious.py").write_text("victim's code\n")
    work = tmp_path / "work"
    (work / "a").mkdir(parents=True)
    (work / "a" / "src").write_text("x\n")
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    commit, _ = run_confined(None, work, gw.checkpoint, str(work), "console:main", "r1")
    shutil.rmtree(work / "a")
    os.symlink(victim, work / "a")
    (work / ".gitignore").write_text("a\n")
    run_confined(None, work, gw.restore, str(work), commit)
    assert (victim / "src" / "precious.py").read_text() == "victim's code\n"
    assert not (work / "a").is_symlink() and (work / "a" / "src").read_text() == "x\n"


def test_a_pointer_and_back_pointer_both_in_the_workdir_prove_nothing(places):
    # The agent writes the pointer, the "worktree git dir" it points to inside its own
    # workdir, that dir's back-pointer, and a commondir naming another thread's repository:
    # that repository and its workdir were bound read-write, and the checkpoint wrote there.
    victim = make_repo(places["roots"] / "victim", {"secret.txt": "victim's work\n"})
    refs_before = git(victim, "for-each-ref")
    mine = places["roots"] / "mine"
    fake = mine / ".fakegit"
    fake.mkdir(parents=True)
    (mine / ".git").write_text(f"gitdir: {fake}\n")
    (fake / "gitdir").write_text(f"{mine}/.git\n")
    (fake / "commondir").write_text(f"{victim}/.git\n")
    assert gw._repository_binds(str(mine)) == (str(mine.resolve()),)
    with pytest.raises(gw.GitError):
        run_confined(sandbox_of(places), mine, gw.checkpoint, str(mine), "console:main", "r1")
    assert git(victim, "for-each-ref") == refs_before


def test_confined_git_sees_an_empty_home(places, monkeypatch):
    # Not the user's ~/.ssh: what the repository makes git run must not read it (nor write
    # authorized_keys), even for an agent whose own sandbox has a private home.
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="spindle-test-home-", dir="/var/tmp"))
    try:
        (home / ".ssh").mkdir()
        (home / ".ssh" / "id_ed25519").write_text("USER-PRIVATE-KEY")
        monkeypatch.setenv("HOME", str(home))
        repo = make_repo(places["roots"] / "mine", {"a.txt": "a\n"})
        spy = repo / ".spy.sh"
        spy.write_text(f"#!/bin/sh\ncat {home}/.ssh/id_ed25519 > {repo}/.leak 2>&1; true\n")
        spy.chmod(0o755)
        git(repo, "config", "core.fsmonitor", str(spy))
        (repo / "a.txt").write_text("changed\n")
        run_confined(sandbox_of(places), repo, gw.checkpoint, str(repo), "console:main", "r1")
        assert (repo / ".leak").exists()  # it ran, confined
        assert "USER-PRIVATE-KEY" not in (repo / ".leak").read_text()
    finally:
        shutil.rmtree(home)


def test_a_workdir_now_resolving_outside_the_roots_is_not_confined_elsewhere(places):
    outside = make_repo(places["outside"] / "repo", {"a.txt": "a\n"})
    refs_before = git(outside, "for-each-ref")
    link = places["roots"] / "mine"
    link.symlink_to(outside)
    with pytest.raises(OSError, match="outside the allowed roots"):
        run_confined(sandbox_of(places), link, gw.checkpoint, str(link), "console:main", "r1")
    assert git(outside, "for-each-ref") == refs_before  # no checkpoint ref written there


def test_a_folder_swapped_for_a_link_between_two_git_runs_is_refused(places):
    # An agent whose workdir holds this repository swaps it for a (relative) link to the
    # user's home between two git runs of one checkpoint: bubblewrap bound the link's
    # target read-write. Binds are now opened without following a link, and mounted from
    # the descriptor.
    repo = make_repo(places["roots"] / "outer" / "sub", {"a.txt": "a\n"})
    secret = places["outside"] / "home"
    secret.mkdir()

    async def main():
        with gw.confined(sandbox_of(places), str(repo)):
            await gw._git(str(repo), "status")  # fine while it is the folder
            aside = repo.with_name("sub.real")
            repo.rename(aside)
            repo.symlink_to(os.path.relpath(secret, repo.parent))
            try:
                with pytest.raises(gw.GitError, match="no longer the folder"):
                    await gw._git(str(repo), "status")
            finally:
                repo.unlink()
                aside.rename(repo)

    trio.run(main)
    assert list(secret.iterdir()) == []


def test_a_submodule_is_checkpointed_confined(places):
    # Its .git is a file naming the superproject's .git/modules/<name>, which has no
    # worktree back-pointer but a core.worktree naming the submodule: git's own record.
    source = make_repo(places["outside"] / "lib", {"lib.txt": "lib\n"})
    top = make_repo(places["roots"] / "super", {"a.txt": "a\n"})
    git(top, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(source), "mod")
    git(top, "commit", "-qm", "submodule")
    module = top / "mod"
    (module / "lib.txt").write_text("changed\n")
    commit, ref = run_confined(
        sandbox_of(places), module, gw.checkpoint, str(module), "console:main", "r1"
    )
    assert git(module, "rev-parse", ref) == commit
    assert git(module, "show", f"{commit}:lib.txt") == "changed"

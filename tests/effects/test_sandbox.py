"""effects/sandbox.py: what a process in the bubblewrap sandbox sees, with the real bwrap
(Debian's, unpacked under .tools/ by `make test`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from threadspindle.effects.sandbox import Sandbox, check_sandbox, sandbox_argv

ROOT = Path(__file__).resolve().parents[2]
BWRAP = ROOT / ".tools" / "bubblewrap" / "usr" / "bin" / "bwrap"


@pytest.fixture
def bwrap() -> str:
    assert BWRAP.exists(), "run `make test` (it unpacks Debian's bubblewrap in .tools/)"
    return str(BWRAP)


def layout(tmp_path: Path) -> dict[str, Path]:
    roots = tmp_path / "roots"
    places = {
        "roots": roots,
        "mine": roots / "mine",
        "other": roots / "other",
        "data": tmp_path / "data",
    }
    for path in places.values():
        path.mkdir(parents=True, exist_ok=True)
    (places["other"] / "secret.txt").write_text("other thread's file")
    (places["data"] / "spindle.db").write_text("the database")
    (places["mine"] / "mine.txt").write_text("my file")
    return places


def test_a_sandboxed_process_sees_its_workdir_and_not_the_rest(tmp_path, bwrap):
    p = layout(tmp_path)
    sandbox = Sandbox(binary=bwrap, hidden=(str(p["data"]),), roots=(str(p["roots"]),))
    check_sandbox(sandbox)
    script = (
        "import os\n"
        "print(open('mine.txt').read())\n"
        f"print(sorted(os.listdir({str(p['roots'])!r})))\n"
        f"print(os.listdir({str(p['data'])!r}))\n"
        "print(len([d for d in os.listdir('/proc') if d.isdigit()]))\n"
        "open('written.txt', 'w').write('ok')\n"
    )
    argv = sandbox_argv(sandbox, ["python3", "-c", script], workdir=str(p["mine"]))
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    mine, roots, data, processes = out.stdout.splitlines()
    assert mine == "my file"
    assert roots == "['mine']"  # the other thread's workdir is not there
    assert data == "[]"  # Spindle's data dir is empty
    assert int(processes) <= 3  # its own PID namespace: bwrap's init, python
    assert (p["mine"] / "written.txt").read_text() == "ok"  # the workdir is writable


def test_other_agents_private_files_in_a_temp_dir_outside_tmp_are_not_seen(
    tmp_path, bwrap, monkeypatch
):
    # TMPDIR elsewhere than /tmp: each agent's private directory (its MCP config and token,
    # agents/base/launch.py) is made there, and the read-only / showed every other one.
    from threadspindle.agents.base.launch import PrivateDir

    temp = Path(tempfile.mkdtemp(prefix="spindle-test-", dir="/var/tmp"))
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(temp))
        other, mine = PrivateDir("spindle-other-"), PrivateDir("spindle-mine-")
        other.write("mcp.json", "Bearer the other thread's token")
        own = mine.write("mcp.json", "my own config")
        p = layout(tmp_path)
        sandbox = Sandbox(binary=bwrap, hidden=(str(p["data"]),), roots=(str(p["roots"]),))
        script = (
            "import os\n"
            f"print(sorted(os.listdir({str(temp)!r})))\n"
            f"print(open({own!r}).read())\n"
            f"print(os.path.exists({other.path!r}))\n"
        )
        argv = sandbox_argv(
            sandbox, ["python3", "-c", script], workdir=str(p["mine"]), expose=(own,)
        )
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        listing, config, other_there = out.stdout.splitlines()
        assert listing == f"[{os.path.basename(mine.path)!r}]"  # only its own directory
        assert config == "my own config" and other_there == "False"
        assert "/var/tmp" in argv  # emptied too, whatever TMPDIR says
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_argv_order_puts_spindles_files_last(tmp_path):
    p = layout(tmp_path)
    roots, work, data = str(p["roots"]), str(p["mine"]), str(p["data"])
    sandbox = Sandbox(hidden=(data, data + "/spindle.db"), roots=(roots,))
    argv = sandbox_argv(sandbox, ["agent"], workdir=work, expose=("/tmp/x/mcp.json",))
    assert argv[-2:] == ["--", "agent"]
    assert argv.index(roots) < argv.index(work)  # roots emptied, then the workdir put back
    assert argv.index(work) < argv.index(data)  # then Spindle's files emptied on top
    assert data + "/spindle.db" not in argv  # inside an emptied dir: no mount point made
    at = argv.index("/tmp/x/mcp.json")
    assert argv[at - 1 : at + 2] == ["--ro-bind", "/tmp/x/mcp.json", "/tmp/x/mcp.json"]


def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A user's home holding Spindle's data dir and config file, as the sandbox's home."""
    home = tmp_path / "home"
    data, config = home / ".local" / "share" / "spindle", home / ".config" / "spindle"
    data.mkdir(parents=True)
    config.mkdir(parents=True)
    (data / "spindle.db").write_text("the database")
    (config / "config.toml").write_text('token = "secret"')
    monkeypatch.setenv("HOME", str(home))
    return {"home": home, "data": data, "config": config / "config.toml"}


def run_in_sandbox(p: dict[str, Path], bwrap: str, script: str) -> list[str]:
    hidden = (str(p["data"]), str(p["data"] / "spindle.db"), str(p["config"]))
    argv = sandbox_argv(Sandbox(binary=bwrap, hidden=hidden), ["sh", "-c", script], workdir=None)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_an_agent_cannot_move_spindles_files_out_from_under_the_sandbox(
    tmp_path, monkeypatch, bwrap
):
    # Renaming a directory above a hidden path would move the real files aside: the next
    # sandbox would hide an empty decoy left at the old path and show them under the new one.
    p = fake_home(tmp_path, monkeypatch)
    share, config_dir = p["data"].parent, p["config"].parent
    script = (
        f"mv {share} {share}.x; echo $?\n"
        f"mv {config_dir} {config_dir}.x; echo $?\n"
        f"mv {p['data']} {p['data']}.x; echo $?\n"
        f"touch {share}/new && echo writable\n"
        f"ls -A {p['data']}; cat {p['config']}; echo end\n"
    )
    *moves, writable, end = run_in_sandbox(p, bwrap, script)
    assert moves == ["1", "1", "1"]  # EBUSY: each is a mount point in the sandbox
    assert writable == "writable"  # the directory's contents stay writable
    assert end == "end"  # the data dir is empty, the config file too
    assert (p["data"] / "spindle.db").exists() and p["config"].exists()  # not moved
    assert sorted(q.name for q in share.parent.iterdir()) == ["share"]
    assert sorted(q.name for q in config_dir.parent.iterdir()) == ["spindle"]


def test_spindles_files_are_hidden_under_a_symlinked_home_entry_too(tmp_path, monkeypatch, bwrap):
    # A home entry that is a symlink (dotfiles kept elsewhere) is bound at its own name: the
    # files must be hidden there, not only at their real path.
    p = fake_home(tmp_path, monkeypatch)
    elsewhere = tmp_path / "dotfiles" / "config"
    elsewhere.parent.mkdir()
    (p["home"] / ".config").rename(elsewhere)
    (p["home"] / ".config").symlink_to(elsewhere)
    config_dir = p["config"].parent
    script = f"cat {p['config']}; mv {config_dir} {config_dir}.x; echo $?\n"
    assert run_in_sandbox(p, bwrap, script) == ["1"]
    assert sorted(q.name for q in elsewhere.iterdir()) == ["spindle"]


def test_hidden_paths_are_resolved_once_so_a_swapped_symlink_hides_nothing_new(
    tmp_path, monkeypatch
):
    # ~/.local/share is a symlink: an agent may replace it with a directory holding a decoy
    # data dir. The next sandbox must still hide the real one, resolved at Spindle's start.
    home, real = tmp_path / "home", tmp_path / "disk" / "share"
    (real / "spindle").mkdir(parents=True)
    (home / ".local").mkdir(parents=True)
    (home / ".local" / "share").symlink_to(real)
    monkeypatch.setenv("HOME", str(home))
    sandbox = Sandbox(hidden=(str(home / ".local" / "share" / "spindle"),))
    first = sandbox_argv(sandbox, ["agent"], workdir=None)
    (home / ".local" / "share").unlink()
    (home / ".local" / "share" / "spindle").mkdir(parents=True)
    later = sandbox_argv(sandbox, ["agent"], workdir=None)
    hidden = os.path.realpath(real / "spindle")
    for argv in (first, later):
        assert argv[argv.index(hidden) - 1] == "--tmpfs"


def test_with_a_private_home_the_users_home_is_empty_whatever_the_roots(bwrap, monkeypatch):
    # With allowed roots that did not cover the home (~/projects), the user's ~/.ssh stayed
    # readable through the read-only `/` when the agent had a private home.
    import shutil
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="spindle-test-home-", dir="/var/tmp"))
    try:
        (home / ".ssh").mkdir()
        (home / ".ssh" / "id_ed25519").write_text("USER-PRIVATE-KEY")
        (home / "projects" / "mine").mkdir(parents=True)
        (home / "agent-home").mkdir()
        monkeypatch.setenv("HOME", str(home))
        sandbox = Sandbox(binary=bwrap, hidden=(), roots=(str(home / "projects"),))
        argv = sandbox_argv(
            sandbox,
            ["sh", "-c", f"cat {home}/.ssh/id_ed25519; ls -a {home}"],
            workdir=str(home / "projects" / "mine"),
            home=str(home / "agent-home"),
        )
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert "USER-PRIVATE-KEY" not in out.stdout
        assert ".ssh" not in out.stdout.split()  # the home shows only what was put back
        assert "agent-home" in out.stdout.split()
    finally:
        shutil.rmtree(home)


def test_a_workdir_swapped_for_a_symlink_out_of_the_roots_is_not_bound(tmp_path, bwrap):
    # Another agent whose workdir holds this one put a link in its place (to ~/.ssh, say):
    # the next launch bound the link's target read-write.
    from threadspindle.effects.sandbox import WorkdirOutsideRoots

    p = layout(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (p["mine"] / "mine.txt").unlink()
    p["mine"].rmdir()
    p["mine"].symlink_to(outside)
    sandbox = Sandbox(binary=bwrap, hidden=(), roots=(str(p["roots"]),))
    with pytest.raises(WorkdirOutsideRoots, match="outside the allowed roots"):
        sandbox_argv(sandbox, ["true"], workdir=str(p["mine"]))
    # A link that stays within the roots, to a third thread's workdir say, is refused
    # too: the conversation's workdir was resolved when it started, so it must still
    # resolve to itself.
    from threadspindle.effects.sandbox import WorkdirMoved

    third = p["roots"] / "third-thread"
    third.mkdir()
    (third / "theirs.txt").write_text("THIRD-THREAD-FILE")
    p["mine"].unlink()
    p["mine"].symlink_to(third)
    with pytest.raises(WorkdirMoved, match="a link was put in its place"):
        sandbox_argv(sandbox, ["true"], workdir=str(p["mine"]))
    # ... and so is a link put in one of its parents.
    p["mine"].unlink()
    p["mine"].mkdir()
    moved = p["roots"] / "moved"
    p["roots"].joinpath("parent").mkdir()
    p["roots"].joinpath("parent", "ws").mkdir()
    p["roots"].joinpath("parent").rename(moved)
    (third / "ws").mkdir()
    p["roots"].joinpath("parent").symlink_to(third)  # roots/parent/ws is third/ws now
    with pytest.raises(WorkdirMoved):
        sandbox_argv(sandbox, ["true"], workdir=str(p["roots"] / "parent" / "ws"))
    # The workdir as it was resolved: bound.
    assert str(p["mine"]) in sandbox_argv(sandbox, ["true"], workdir=str(p["mine"]))


def test_a_workdir_swapped_while_the_sandbox_starts_is_not_followed(tmp_path, bwrap, monkeypatch):
    # The launch checks the workdir, then bubblewrap mounts it: a link put in its place in
    # between (here: once the command line is built) was followed when the bind named the
    # path. It is bound from the descriptor opened at the check now, so the agent sees its
    # own folder, wherever the path points by then.
    import trio

    from threadspindle.effects import process

    p = layout(tmp_path)
    third = p["roots"] / "third-thread"
    third.mkdir()
    (third / "theirs.txt").write_text("THIRD-THREAD-FILE")
    sandbox = Sandbox(binary=bwrap, hidden=(), roots=(str(p["roots"]),))
    real_argv = process.sandbox_argv

    def build_then_swap(*args, **kwargs):
        argv = real_argv(*args, **kwargs)
        p["mine"].rename(p["roots"] / "mine.aside")
        p["mine"].symlink_to(third)
        return argv

    monkeypatch.setattr(process, "sandbox_argv", build_then_swap)

    async def main() -> tuple[list[str], int]:
        proc = await process.ManagedProcess.spawn(
            ["/bin/sh", "-c", "ls; cat ./*.txt"], cwd=str(p["mine"]), sandbox=sandbox, stdin=False
        )
        lines = [line async for line in proc.stdout_lines()]
        code = await proc.wait()
        return [*lines, *proc.stderr_tail], code

    lines, code = trio.run(main)
    assert code == 0, lines
    assert "mine.txt" in lines and "my file" in lines
    assert "THIRD-THREAD-FILE" not in lines and "theirs.txt" not in lines

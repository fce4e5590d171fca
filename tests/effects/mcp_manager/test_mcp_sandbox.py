"""The process manager with the agent sandbox on: a thread's processes stay in its workdir
(else a sandboxed agent could have the manager run, outside, what it may not run itself)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from mcp_kit import call, call_error, make_config, open_client

from threadspindle.effects.mcp_manager import serve_process_manager
from threadspindle.effects.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[3]
BWRAP = ROOT / ".tools" / "bubblewrap" / "usr" / "bin" / "bwrap"


async def test_a_sandboxed_thread_process_stays_in_its_workdir(tmp_path, nursery):
    assert BWRAP.exists(), "run `make test` (it unpacks Debian's bubblewrap in .tools/)"
    roots, mine, other = (
        tmp_path / "roots",
        tmp_path / "roots" / "mine",
        tmp_path / "roots" / "other",
    )
    for path in (mine, other):
        path.mkdir(parents=True)
    (other / "secret.txt").write_text("other thread's file")
    (other / "secret.sh").write_text("#!/bin/sh\necho ran\n")
    (other / "secret.sh").chmod(0o755)
    (mine / "tool.sh").write_text("#!/bin/sh\necho mine\n")
    (mine / "tool.sh").chmod(0o755)
    sandbox = Sandbox(binary=str(BWRAP), hidden=(str(tmp_path / "data"),), roots=(str(roots),))
    config = make_config(tmp_path, allowed_roots=(roots,), sandbox=sandbox)
    manager = await nursery.start(serve_process_manager, config)
    thread = "thread-sandboxed"
    manager.bind_thread(thread, str(mine))
    async with open_client(manager.url, manager.token_for_thread(thread)) as client:
        text = await call_error(client, "start_process", name="peek", command="cat", cwd=str(other))
        assert "outside this thread's workdir" in text
        # Whether a file it may not see exists is not told: one answer with or without it.
        answers = [
            await call_error(client, "start_process", name="probe", command=str(path))
            for path in (other / "secret.txt", other / "nothing.txt")
        ]
        assert answers[0] == answers[1].replace("nothing.txt", "secret.txt")
        assert "not found or not executable" in answers[0]
        # Nor whether an executable is there: it is looked up inside the sandbox, where
        # the other workdir is not (outside, an executable one started, and failed).
        for name, how in (
            ("by-path", {"command": str(other / "secret.sh")}),
            ("on-path", {"command": "secret.sh", "env": {"PATH": str(other)}}),
        ):
            text = await call_error(client, "start_process", name=name, **how)
            assert "not found or not executable" in text
        # What it can see is found, by path and on PATH.
        for name, how in (
            ("by-path2", {"command": "./tool.sh"}),
            ("on-path2", {"command": "tool.sh", "env": {"PATH": str(mine)}}),
        ):
            started = await call(client, "start_process", name=name, cwd=str(mine), **how)
            assert started["status"] in ("starting", "running", "exited")
        # In its own workdir it runs, sandboxed: the other workdir is not there.
        await call(
            client, "start_process", name="look", command="ls", args=[str(other)], cwd=str(mine)
        )
        for _ in range(200):
            out = await call(client, "get_output", name="look")
            if out["status"] != "running" and out["status"] != "starting":
                break
            await trio.sleep(0.05)
    assert "secret.txt" not in out["stdout"] and out["exit_code"] != 0


PRELOAD_SOURCE = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void loaded(void) {
    char comm[64] = "?";
    FILE *f = fopen("/proc/self/comm", "r");
    if (f) { fgets(comm, sizeof comm, f); fclose(f); }
    FILE *out = fopen(MARKER, "a");
    if (out) { fprintf(out, "loaded in pid %d %s", getpid(), comm); fclose(out); }
}
"""


def _preload_library(folder: Path, marker: Path) -> Path:
    """A shared library the agent compiled in its workdir: its constructor notes each
    process that loads it in ``marker``."""
    source, library = folder / "evil.c", folder / "evil.so"
    source.write_text(PRELOAD_SOURCE)
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(library), str(source), f'-DMARKER="{marker}"'],
        check=True,
    )
    return library


async def test_loader_variables_never_reach_the_guard_or_bubblewrap(tmp_path, nursery):
    # The guard (python) and bubblewrap run outside the sandbox with the env the agent
    # passes: an LD_PRELOAD would run the agent's library there, next to the database.
    assert BWRAP.exists(), "run `make test` (it unpacks Debian's bubblewrap in .tools/)"
    assert shutil.which("gcc"), "gcc builds the library an agent would preload"
    mine = tmp_path / "roots" / "mine"
    mine.mkdir(parents=True)
    marker = mine / "loaded.txt"
    library = _preload_library(mine, marker)
    sandbox = Sandbox(binary=str(BWRAP), hidden=(str(tmp_path / "data"),), roots=(str(mine),))
    config = make_config(tmp_path, allowed_roots=(mine,), sandbox=sandbox)
    manager = await nursery.start(serve_process_manager, config)
    thread = "thread-preload"
    manager.bind_thread(thread, str(mine))
    async with open_client(manager.url, manager.token_for_thread(thread)) as client:
        for env in ({"LD_PRELOAD": str(library)}, {"LD_AUDIT": str(library)}):
            text = await call_error(
                client, "start_process", name="x", command="/bin/true", cwd=str(mine), env=env
            )
            [name] = env
            assert f"environment variable {name!r} is refused" in text
            assert "dynamic loader" in text and "outside the sandbox" in text
        await trio.sleep(0.5)
        assert (await call(client, "list_processes"))["processes"] == []
    assert not marker.exists(), marker.read_text()


async def test_a_relative_sandbox_binary_is_not_found_in_the_agent_workdir(
    tmp_path, nursery, monkeypatch
):
    # `agent_sandbox_binary = "tools/bwrap"` means Spindle's cwd; the guard starts it from
    # the process's cwd, the agent's workdir, where the agent can put its own tools/bwrap.
    assert BWRAP.exists(), "run `make test` (it unpacks Debian's bubblewrap in .tools/)"
    spindle_cwd = tmp_path / "spindle"
    (spindle_cwd / "tools").mkdir(parents=True)
    (spindle_cwd / "tools" / "bwrap").symlink_to(BWRAP)
    mine = tmp_path / "roots" / "mine"
    (mine / "tools").mkdir(parents=True)
    marker = tmp_path / "escaped.txt"
    planted = mine / "tools" / "bwrap"
    planted.write_text(f"#!/bin/sh\necho outside > {marker}\n")
    planted.chmod(0o755)
    monkeypatch.chdir(spindle_cwd)
    sandbox = Sandbox(binary="tools/bwrap", hidden=(str(tmp_path / "data"),), roots=(str(mine),))
    config = make_config(tmp_path, allowed_roots=(mine,), sandbox=sandbox)
    manager = await nursery.start(serve_process_manager, config)
    thread = "thread-relative"
    manager.bind_thread(thread, str(mine))
    async with open_client(manager.url, manager.token_for_thread(thread)) as client:
        await call(client, "start_process", name="hi", command="echo", args=["hi"], cwd=str(mine))
        for _ in range(200):
            out = await call(client, "get_output", name="hi")
            if out["status"] not in ("running", "starting"):
                break
            await trio.sleep(0.05)
    assert not marker.exists()
    assert out["stdout"] == "hi\n" and out["exit_code"] == 0


@pytest.fixture
def user_home(monkeypatch) -> Iterator[Path]:
    """A user home outside /tmp (the sandbox empties /tmp) holding a private key."""
    home = Path(tempfile.mkdtemp(prefix="spindle-test-home-", dir="/var/tmp"))
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text("USER-PRIVATE-KEY")
    monkeypatch.setenv("HOME", str(home))
    yield home
    shutil.rmtree(home)


async def _output(client, name: str) -> dict:
    for _ in range(200):
        out = await call(client, "get_output", name=name)
        if out["status"] not in ("running", "starting"):
            return out
        await trio.sleep(0.05)
    raise AssertionError(f"{name} did not end")


async def test_a_process_sees_its_agents_private_home_not_the_users(tmp_path, nursery, user_home):
    # The agent, with a private home, cannot read ~/.ssh: its processes used to see the
    # user's hidden home entries all the same, read-write (authorized_keys included).
    assert BWRAP.exists(), "run `make test` (it unpacks Debian's bubblewrap in .tools/)"
    mine, private = user_home / "projects" / "mine", user_home.parent / f"{user_home.name}-agent"
    mine.mkdir(parents=True)
    private.mkdir()
    try:
        sandbox = Sandbox(binary=str(BWRAP), hidden=(str(tmp_path / "data"),), roots=(str(mine),))
        config = make_config(tmp_path, allowed_roots=(mine,), sandbox=sandbox)
        manager = await nursery.start(serve_process_manager, config)
        manager.bind_thread("t", str(mine), home=str(private))
        script = f"cat {user_home}/.ssh/id_ed25519; echo x >> {user_home}/.ssh/authorized_keys"
        async with open_client(manager.url, manager.token_for_thread("t")) as client:
            await call(client, "start_process", name="peek", command="sh", args=["-c", script])
            out = await _output(client, "peek")
        assert "USER-PRIVATE-KEY" not in out["stdout"]
        assert not (user_home / ".ssh" / "authorized_keys").exists()
    finally:
        shutil.rmtree(private)


async def test_a_thread_whose_agent_is_not_bound_starts_no_sandboxed_process(tmp_path, nursery):
    # After a restart, before its agent starts again, a thread has no workdir to confine
    # a process to: its cwd could be any thread's, and the sandbox bound that one.
    assert BWRAP.exists(), "run `make test` (it unpacks Debian's bubblewrap in .tools/)"
    other = tmp_path / "roots" / "other"
    other.mkdir(parents=True)
    sandbox = Sandbox(
        binary=str(BWRAP), hidden=(str(tmp_path / "data"),), roots=(str(tmp_path / "roots"),)
    )
    config = make_config(tmp_path, allowed_roots=(tmp_path / "roots",), sandbox=sandbox)
    manager = await nursery.start(serve_process_manager, config)
    async with open_client(manager.url, manager.token_for_thread("t")) as client:
        text = await call_error(client, "start_process", name="x", command="true", cwd=str(other))
    assert "agent is not running" in text

"""``spindle runner`` and ``spindle gateway`` hold the cluster password and the bot tokens in
their environment, and a runner's agents run as the same user: like ``spindle run``, both
make themselves non-dumpable, so ``/proc/<pid>/environ`` is refused to a same-user process.

The tests run as root, and root with its capabilities reads any process's environment
whatever Spindle does. So, as in ``test_agent_isolation.py``, the commands and the reader
run with every capability dropped (``setpriv --bounding-set -all``): uid 0 without
``CAP_SYS_PTRACE``, the position of a same-user agent, where only the dumpable flag decides.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from cli_harness import SPINDLE, environment, make_place
from test_scale_out import Lines

from threadspindle.testkit.nats_cluster import nats_cluster

CAPLESS = ["setpriv", "--bounding-set", "-all", "--inh-caps", "-all", "--"]
DISCORD_TOKEN = "MTIzNDU2Nzg5MDEyMzQ1Njc4.GhIjKl.the-secret-bot-token-value"


def _environ_as_same_user(pid: int) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CAPLESS, "cat", f"/proc/{pid}/environ"], capture_output=True)


def _wait_for_exec(pid: int, name: str) -> None:
    """Until ``setpriv`` has run ``name``, the process still holds root's capabilities, and a
    capless reader is refused its environment for that reason, not for the dumpable flag."""
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}/comm").read_text().strip() != name:
        assert time.monotonic() < deadline, f"{pid} never ran {name}"
        time.sleep(0.01)


def _start(place: dict[str, Path], env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CAPLESS, *SPINDLE, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        cwd=place["work"],
        env=env,
    )


@pytest.mark.timeout(120)
def test_runner_and_gateway_environ_is_refused_to_the_same_user(tmp_path: Path) -> None:
    place = make_place(tmp_path)
    with nats_cluster(tmp_path / "nats") as cluster:
        password = cluster.password
        assert password is not None
        env = environment(
            place,
            {"SPINDLE_CLUSTER__PASSWORD": password, "SPINDLE_DISCORD_TOKEN": DISCORD_TOKEN},
        )
        url, work = cluster.plain_urls[0], str(place["work"])
        runner = _start(place, env, "runner", "--nats", url, "--root", work, "--name", "r1")
        gateway = _start(place, env, "gateway", "--console", "--nats", url, "--root", work)
        try:
            Lines(runner).wait_for(r"^r1: serving ")
            Lines(gateway).wait_for(r"^gateway: ")
            # The reader is allowed what a same-user agent is: a dumpable process of the
            # same user (the test itself) is readable.
            control = subprocess.Popen([*CAPLESS, "sleep", "30"], env=env)
            try:
                _wait_for_exec(control.pid, "sleep")
                seen = _environ_as_same_user(control.pid)
                assert seen.returncode == 0 and DISCORD_TOKEN.encode() in seen.stdout
            finally:
                control.kill()
                control.wait()
            for proc in (runner, gateway):
                assert proc.poll() is None
                seen = _environ_as_same_user(proc.pid)
                assert seen.returncode != 0, proc.args
                assert b"Permission denied" in seen.stderr
                assert password.encode() not in seen.stdout
                assert DISCORD_TOKEN.encode() not in seen.stdout
        finally:
            for proc in (runner, gateway):
                proc.kill()
                proc.wait(10)

"""``raise_open_file_limit``: the soft limit on open files raised at start (to the hard
limit at most), in ``spindle run`` itself, so its agents get it too."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import resource, sys
from threadspindle.effects.open_files import raise_open_file_limit
soft, hard = (int(a) for a in sys.argv[1:3])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
print(raise_open_file_limit(int(sys.argv[3])), *resource.getrlimit(resource.RLIMIT_NOFILE))
"""


def _probe(soft: int, hard: int, want: int) -> list[int]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(soft), str(hard), str(want)],
        capture_output=True,
        text=True,
        check=True,
    )
    return [int(x) for x in out.stdout.split()]


def test_the_soft_limit_is_raised_toward_the_wanted_never_past_the_hard_one() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = min(hard, 4096)
    assert top > 300, "the machine's hard limit leaves nothing to test"
    assert _probe(256, top, 1000) == [1000, 1000, top]  # raised to what is wanted
    assert _probe(256, top, top * 2) == [top, top, top]  # the hard limit caps it
    assert _probe(300, top, 256) == [300, 300, top]  # never lowered


def _spindle_at_soft_limit_256(place: dict[str, Path]) -> dict[str, Any]:
    """How the tests below start ``spindle``: in the place's folders, no agent CLI on PATH,
    at a soft limit of 256 open files (as a session's 1,024: a few hundred agents' pipes)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return {
        "cwd": place["work"],
        "env": {
            "PATH": "/usr/bin:/bin",
            "HOME": str(place["home"]),
            "SPINDLE_DATA_DIR": str(place["data"]),
            "SPINDLE_CONFIG": str(place["config"]),
            "PYTHONPATH": str(ROOT),
        },
        "preexec_fn": lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)),
    }


def test_spindle_run_and_its_agents_run_with_the_raised_limit(place, tmp_path: Path) -> None:
    # Started at a soft limit of 256 (as a session's 1,024: a few hundred agents' pipes),
    # its agent (a process of its own, which inherits it) reports the limit Spindle runs with.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    agent = tmp_path / "limit_agent.py"
    agent.write_text(
        "import resource, sys\nsys.stdin.read()\n"
        "print('nofile', resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    place["config"].write_text(f'[agents.command]\ncommand = ["{sys.executable}", "{agent}"]\n')
    out = subprocess.run(
        [sys.executable, "-m", "threadspindle.app.cli", "run", "--no-mcp", "--agent", "command"],
        input="limits please\n/wait\n/quit\n",
        capture_output=True,
        text=True,
        timeout=60,
        **_spindle_at_soft_limit_256(place),
    )
    assert out.returncode == 0, out.stderr
    assert f"nofile {min(hard, 65_536)}" in out.stdout, out.stdout + out.stderr


def test_spindle_mcp_runs_with_the_raised_limit(place) -> None:
    # Alone, the manager holds its processes' files and its connections (capped at an
    # eighth of this limit): at a session's soft limit its cap would be 128.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    proc = subprocess.Popen(
        [sys.executable, "-m", "threadspindle.app.cli", "mcp"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **_spindle_at_soft_limit_256(place),
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("process manager on http://127.0.0.1:")
        soft = psutil.Process(proc.pid).rlimit(psutil.RLIMIT_NOFILE)[0]
        assert soft == min(hard, 65_536)
    finally:
        proc.terminate()
        proc.wait(20)

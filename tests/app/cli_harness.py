"""Running the real ``spindle`` command in tests (imported as ``cli_harness``): each test gets
its own data dir, config file, HOME and workdir, and PATH holds no agent CLI, so ``run``
offers the built-in echo agent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPINDLE = [sys.executable, "-m", "threadspindle.app.cli"]


def make_place(base: Path) -> dict[str, Path]:
    work = base / "work"
    work.mkdir(parents=True)
    home = base / "home"
    home.mkdir()
    return {"work": work, "home": home, "data": base / "data", "config": base / "none.toml"}


def environment(place: dict[str, Path], extra: dict[str, str] | None = None) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",  # no agent CLI on it: the echo demo is offered
        "HOME": str(place["home"]),
        "SPINDLE_DATA_DIR": str(place["data"]),
        "SPINDLE_CONFIG": str(place["config"]),
        "PYTHONPATH": str(ROOT),
        **(extra or {}),
    }


def spindle(
    place: dict[str, Path],
    *args: str,
    stdin: str = "",
    timeout: float = 60,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SPINDLE, *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=place["work"],
        env=environment(place, env),
        timeout=timeout,
    )


def lines(*items: str) -> str:
    return "\n".join(items) + "\n"

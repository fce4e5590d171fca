"""The pure core type-checks under ``mypy --strict`` (the style guide's bar for runtime/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PURE_CORE = [
    "runtime/frozen.py",
    "runtime/model.py",
    "runtime/actions.py",
    "runtime/agent_events.py",
    "runtime/effects.py",
    "runtime/guards.py",
    "runtime/phase_table.py",
    "runtime/transition_step.py",
    "runtime/transitions.py",
    "runtime/transitions_user.py",
    "runtime/transitions_agent.py",
]


def test_pure_core_is_strictly_typed():
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *PURE_CORE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr

"""Suite-wide test settings and fixtures: the hypothesis profiles, and ``place``.

``dev`` (default) keeps local runs quick; ``ci`` (``make test``) runs enough examples for the
stateful harness to matter; ``deep`` is for a long search by hand. Tests that want more or
fewer examples than a profile gives set their own ``settings``. ``place`` is where a
``spindle`` subprocess runs (its own workdir, HOME, data dir and config path under
tmp_path): the app tests and the console's.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=300,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("dev", max_examples=60, stateful_step_count=40, deadline=None)
# By hand, for a search far past CI's (the state machine: ~14 min here; README "Tests").
settings.register_profile(
    "deep",
    max_examples=15_000,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture
def place(tmp_path: Path) -> dict[str, Path]:
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    return {"work": work, "home": home, "data": tmp_path / "data", "config": tmp_path / "none.toml"}

"""Fixtures of the ingress tests: ``place`` is where a ``spindle`` subprocess runs (its
own workdir, HOME, data dir and config path under tmp_path)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def place(tmp_path: Path) -> dict[str, Path]:
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    return {"work": work, "home": home, "data": tmp_path / "data", "config": tmp_path / "none.toml"}

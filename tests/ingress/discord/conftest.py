"""Fixtures of the Discord tests: ``world`` is a started fake Discord with a guild,
channels and users (see ``discord_harness``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from threadspindle.testkit.fake_discord.harness import World, fake_world


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with fake_world(tmp_path) as built:
        yield built

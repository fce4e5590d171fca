"""Fixtures of the Slack tests: ``sl`` is a started fake Slack with its channels and users
(``testkit.fake_slack.stack.slack_world``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from threadspindle.testkit.fake_slack.stack import SlackWorld, slack_world


@pytest.fixture
def sl(tmp_path: Path) -> Iterator[SlackWorld]:
    with slack_world(tmp_path) as built:
        yield built

"""Fixtures of the Telegram tests: ``tg`` is a started fake Telegram with its chats and
users (``testkit.fake_telegram.stack.telegram_world``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from threadspindle.testkit.fake_telegram.stack import TelegramWorld, telegram_world


@pytest.fixture
def tg(tmp_path: Path) -> Iterator[TelegramWorld]:
    with telegram_world(tmp_path) as built:
        yield built

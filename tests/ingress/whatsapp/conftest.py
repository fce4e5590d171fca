"""Fixtures of the WhatsApp tests: ``wa`` is a started fake WhatsApp with its users
(``testkit.fake_whatsapp.stack.whatsapp_world``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from threadspindle.testkit.fake_whatsapp.stack import WhatsAppWorld, whatsapp_world


@pytest.fixture
def wa(tmp_path: Path) -> Iterator[WhatsAppWorld]:
    with whatsapp_world(tmp_path) as built:
        yield built

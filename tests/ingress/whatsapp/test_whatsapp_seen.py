"""``SeenMessages`` (``ingress/whatsapp/seen.py``): the message ids handled, kept on disk for
as long as a delivery of them is taken, and in memory only when the file is unusable."""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

import pytest

from threadspindle.ingress.whatsapp import seen as seen_module
from threadspindle.ingress.whatsapp.seen import SeenMessages


def test_ids_outlive_the_process_and_expire_after_their_time(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "seen.sqlite"
    first = SeenMessages(path, keep_s=100.0, remembered=2)
    for i in range(5):
        first.add(f"wamid.{i}", at=1000.0 + i)
    assert all(f"wamid.{i}" in first for i in range(5))  # 3 from the file, 2 from memory
    assert "wamid.other" not in first
    first.close()
    assert os.stat(path).st_mode & 0o777 == 0o600
    second = SeenMessages(path, keep_s=100.0, remembered=2)  # a restart
    assert all(f"wamid.{i}" in second for i in range(5)) and len(second) == 5
    # Every PRUNE_EVERY ids, those older than keep_s go.
    monkeypatch.setattr(seen_module, "PRUNE_EVERY", 1)
    second.add("wamid.late", at=1102.5)
    assert [f"wamid.{i}" in second for i in range(5)] == [False, False, False, True, True]
    assert len(second) == 3


def test_an_unusable_file_keeps_the_ids_in_memory_and_says_what_is_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    garbage = tmp_path / "seen.sqlite"
    garbage.write_bytes(b"not a database at all, " * 100)
    with caplog.at_level(logging.WARNING, "spindle.whatsapp"):
        seen = SeenMessages(garbage, keep_s=100.0, remembered=10)
    assert "kept in memory only" in caplog.text and str(garbage) in caplog.text
    seen.add("wamid.1", at=1.0)
    assert "wamid.1" in seen and "wamid.2" not in seen
    assert garbage.read_bytes().startswith(b"not a database")  # left for the user to see


def test_a_file_failing_in_use_falls_back_to_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "seen.sqlite"
    seen = SeenMessages(path, keep_s=100.0, remembered=10)
    seen.add("wamid.1", at=1.0)
    with sqlite3.connect(path) as other:
        other.execute("DROP TABLE seen")  # as good as a file replaced under it
    with caplog.at_level(logging.WARNING, "spindle.whatsapp"):
        seen.add("wamid.2", at=2.0)
    assert "kept in memory only" in caplog.text
    assert "wamid.1" in seen and "wamid.2" in seen  # memory still has both

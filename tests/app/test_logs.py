"""The JSON log file when the disk refuses its writes (issue 19.6): one line on the terminal,
never a "--- Logging error ---" traceback per record; back to writing by itself, with a
record of how many were dropped and no half-written line left in the file.

A real process with a real file: ``RLIMIT_FSIZE`` makes writes past a size fail with EFBIG
(the same failed ``write`` a full disk gives with ENOSPC), and raising the limit again is
space coming back.
"""

from __future__ import annotations

import json
import logging
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cli_harness import ROOT

from threadspindle.app import logs

SCRIPT = """
import logging, resource, signal, sys
from pathlib import Path

import threadspindle.app.logs
from threadspindle.app.logs import configure_logging

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
threadspindle.app.logs._FileHandler.retry_s = 0.0  # try the file again at the next record
configure_logging("error", Path(sys.argv[1]), terminal=True)
log = logging.getLogger("spindle.test")
_, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, hard))
for n in range(300):
    log.info("record %d %s", n, "x" * 100)
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
for n in range(300, 310):
    log.info("record %d", n)
"""


def test_a_log_file_that_cannot_be_written_is_one_line_and_comes_back(tmp_path: Path) -> None:
    path = tmp_path / "spindle.log.jsonl"
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "Logging error" not in out.stderr and "Traceback" not in out.stderr
    [said] = out.stderr.strip().splitlines()
    assert said.startswith(f"spindle: cannot write the log file {path}: File too large;")
    records = [json.loads(line) for line in path.read_text().splitlines()]  # every line
    messages = [r["msg"] for r in records]
    written = [int(m.split()[1]) for m in messages if m.startswith("record ")]
    dropped_note = next(m for m in messages if "could not be written for a while" in m)
    dropped = int(dropped_note.split(": ")[-1].split()[0])
    assert written[:3] == [0, 1, 2] and written[-10:] == list(range(300, 310))
    assert dropped > 0 and len(written) + dropped == 310
    assert path.stat().st_size > 20_000


def test_the_log_file_is_private_and_rotated_by_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Unrotated, anything that makes Spindle log (an unsigned POST to the WhatsApp webhook
    # writes a warning) could fill the disk; the file also quotes prompts: private.
    monkeypatch.setattr(logs._FileHandler, "max_bytes", 10_000)
    monkeypatch.setattr(logs._FileHandler, "backups", 2)
    path = tmp_path / "spindle.log.jsonl"
    handler = logs._FileHandler(path)
    handler.setFormatter(logs._JsonFormatter())
    for n in range(1000):
        record = logging.LogRecord(
            "spindle.test", logging.INFO, __file__, 0, "record %d", (n,), None
        )
        handler.handle(record)
    handler.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["spindle.log.jsonl", "spindle.log.jsonl.1", "spindle.log.jsonl.2"]
    for name in files:
        assert (tmp_path / name).stat().st_size <= 10_000
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
        assert all(json.loads(line) for line in (tmp_path / name).read_text().splitlines())
    last = json.loads(path.read_text().splitlines()[-1])
    assert last["msg"] == "record 999"


LIBRARY_DEBUG = """
import logging, sys
from pathlib import Path
from threadspindle.app.logs import configure_logging

configure_logging("error", Path(sys.argv[1]), terminal=False)
for name in ("markdown_it.rules_block", "some.library", "spindle.actor", "threadspindle.x"):
    logging.getLogger(name).debug("debug of %s", name)
    logging.getLogger(name).info("info of %s", name)
"""


def test_the_log_file_keeps_debug_records_of_spindle_only(tmp_path: Path) -> None:
    # A library's DEBUG chatter (markdown-it: every rule of every message it renders)
    # rotated a flooded chat's useful records out of the file within seconds.
    path = tmp_path / "spindle.log.jsonl"
    subprocess.run(
        [sys.executable, "-c", LIBRARY_DEBUG, str(path)], check=True, cwd=ROOT, timeout=60
    )
    messages = {json.loads(line)["msg"] for line in path.read_text().splitlines()}
    assert messages == {
        "info of markdown_it.rules_block",
        "info of some.library",
        "debug of spindle.actor",
        "info of spindle.actor",
        "debug of threadspindle.x",
        "info of threadspindle.x",
    }

"""agents.gemini_retries: which CLI lines announce a retry, and following the CLI's
debug log file (bounded, emptied as it is read, removed at the end)."""

from __future__ import annotations

import os
from pathlib import Path

import trio

from threadspindle.agents.gemini import retries as gemini_retries
from threadspindle.agents.gemini.retries import DebugLogWatch, retry_event
from threadspindle.runtime.core.agent_events import AgentError

LOGGED = (
    "[2026-11-23T19:45:36.208Z] [WARN] Attempt 1 failed with status 503. Retrying with "
    'backoff... _ApiError: {"error":{"code":503}}'
)


def test_a_retry_notice_becomes_a_retryable_error_saying_which_retry() -> None:
    event = retry_event(LOGGED, max_retries=2)
    assert event is not None and event.message.startswith("Attempt 1 failed with status 503")
    assert event == AgentError(
        message=LOGGED.split("] ", 2)[-1],  # without the log's time and level
        retryable=True,
        attempt=1,
        max_retries=2,
    )
    stderr = "Attempt 2 failed with 5xx error. Retrying with backoff..."
    assert retry_event(stderr, max_retries=2).attempt == 2  # type: ignore[union-attr]


def test_the_final_failure_and_other_lines_are_not_retries() -> None:
    assert retry_event("Attempt 3 failed: overloaded. Max attempts reached", 2) is None
    assert retry_event("[DEBUG] Hook system initialized successfully", 2) is None


async def test_the_watch_follows_appended_lines_and_cleans_up(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(gemini_retries, "TRUNCATE_AT", 100)
    watch = DebugLogWatch(str(tmp_path / "home"))
    seen: list[str] = []

    async def on_line(line: str) -> None:
        seen.append(line)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch.follow, on_line)
        with open(watch.path, "a") as log:  # the CLI appends
            log.write("[DEBUG] x\n" * 20 + "half")
            log.flush()
            await trio.sleep(0.6)
            assert seen == ["[DEBUG] x"] * 20
            log.write(" a line\n" + LOGGED + "\n")
            log.flush()
            await trio.sleep(0.6)
        nursery.cancel_scope.cancel()
    assert seen[20:] == ["half a line", LOGGED]
    assert os.path.getsize(watch.path) < 100 + len(LOGGED)  # emptied once read past the bound
    watch.close()
    assert not os.path.exists(watch.path)


async def test_a_symlink_put_in_place_of_the_log_is_neither_read_nor_truncated(
    tmp_path: Path, monkeypatch
) -> None:
    # The log is in the thread's settings home, which a sandboxed agent can write: by its
    # path, the watch read a link's target and, past the bound, truncated it (the database).
    monkeypatch.setattr(gemini_retries, "TRUNCATE_AT", 100)
    database = tmp_path / "spindle.db"
    database.write_text("Attempt 1 failed: a victim's prompt. Retrying\n" * 50)
    before = database.read_bytes()
    watch = DebugLogWatch(str(tmp_path / "home"))
    os.unlink(watch.path)
    os.symlink(database, watch.path)
    seen: list[str] = []

    async def on_line(line: str) -> None:
        seen.append(line)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch.follow, on_line)
        await trio.sleep(0.6)
        nursery.cancel_scope.cancel()
    assert seen == [] and database.read_bytes() == before
    watch.close()
    assert database.read_bytes() == before  # the link is removed, not its target

"""A disk that refuses the log's writes (issue 19.6), on a real SQLite file made "full" with
``PRAGMA max_page_count`` (SQLITE_FULL: the same error a full disk gives; the real full disk
and read-only file system are in tests/app/test_run_on_a_full_disk.py).

The log keeps every action buffered and retries until the disk takes writes again; the
runtime tells every thread, refuses what people send (with a reply) while answering
``/status``, and recovers by itself."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from runtime_harness import Chat, running, until

from threadspindle.runtime.core.actions import StatusRequested, UserMessage
from threadspindle.runtime.core.effect_types import PostOutput, ReplyToCommand
from threadspindle.runtime.live.log import EventLog, LogUnwritable
from threadspindle.runtime.live.registry import WRITABLE_AGAIN_NOTICE


def _status(n: int) -> StatusRequested:
    return StatusRequested(thread_id="t", action_id=f"s{n}", at=float(n))


def _fill(log: EventLog) -> None:
    """No page beyond those the file has now: the next write that needs one fails."""
    pages = log.conn.execute("PRAGMA page_count").fetchone()[0]
    log.conn.execute(f"PRAGMA max_page_count={pages}")


def _make_room(log: EventLog) -> None:
    log.conn.execute("PRAGMA max_page_count=1073741823")


def _big(n: int) -> UserMessage:
    return UserMessage(
        thread_id="t", action_id=f"u{n}", at=float(n), author_id="a", text="x" * 20_000
    )


def test_a_full_disk_raises_the_real_error_and_keeps_the_rows(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "log.sqlite3").open()
    log.append(_status(1))
    log.flush()
    _fill(log)
    log.append(_big(2))
    # It used to raise "cannot rollback - no transaction is active", hiding the real error.
    with pytest.raises(LogUnwritable, match="the disk is full"):
        log.flush()
    assert log.statistics().pending == 1 and not log.is_durable(2)
    _make_room(log)
    assert log.flush() == 1 and log.is_durable(2)
    assert [e.seq for e in log.read("t")] == [1, 2]
    log.close()


def test_closing_while_full_says_how_many_actions_were_not_saved(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "log.sqlite3").open()
    log.append(_status(1))
    log.flush()
    _fill(log)
    log.append(_big(2))
    log.append(_big(3))
    with pytest.raises(LogUnwritable) as caught:
        log.close()
    assert caught.value.unsaved == 2 and "the disk is full" in str(caught.value)
    with EventLog(tmp_path / "log.sqlite3") as again:  # released: it opens again
        assert [e.seq for e in again.read("t")] == [1]


async def test_the_flusher_retries_until_the_disk_takes_writes_again(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    changes: list[str | None] = []
    with EventLog(tmp_path / "log.sqlite3", retry_interval_s=1.0) as log:
        log.on_writability(lambda error: changes.append(error and error.reason))
        async with trio.open_nursery() as nursery:
            await nursery.start(log.run_flusher)
            await log.wait_durable(log.append(_status(1)))
            _fill(log)
            ticket = log.append(_big(2))
            # Ingress is not kept waiting on a full disk; the reactor still waits.
            assert await log.wait_durable_or_unwritable(ticket) is False
            assert log.unwritable is not None and changes == ["the disk is full"]
            await trio.sleep(5)
            assert log.write_failures >= 5 and not log.is_durable(ticket)
            _make_room(log)
            with trio.fail_after(2):
                await log.wait_durable(ticket)
            assert log.unwritable is None and changes == ["the disk is full", None]
            nursery.cancel_scope.cancel()
        assert [e.seq for e in log.read("t")] == [1, 2]


async def test_the_runtime_refuses_prompts_answers_status_and_recovers_by_itself(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with running(tmp_path, log_options={"retry_interval_s": 1.0}) as rt:
        main = Chat(rt, "t1", str(tmp_path))
        side = Chat(rt, "t2", str(tmp_path))
        await main.start()
        await side.start()
        await main.say("first")
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        await rt.wait_quiet()
        _fill(rt.log)
        # The prompt that meets the full disk is held, not acknowledged, not lost.
        held = await main.say("x" * 20_000)
        await until(lambda: rt.log.unwritable is not None)
        for thread in ("t1", "t2"):  # every live thread is told
            await until(lambda t=thread: any("cannot save" in n for n in rt.chat.texts(t)))
        assert rt.snapshot("t1").counters.completed == 1  # its effects wait
        refused = await main.queue("refused prompt")
        await rt.wait_quiet("t2")
        status = await side.send(StatusRequested(**side._base()))
        await until(
            lambda: any(
                isinstance(e, ReplyToCommand) and e.action_id == status.action_id
                for e in rt.chat.of_thread("t2")
            )
        )
        replies = {
            e.action_id: e.text
            for e in rt.chat.of_thread("t1") + rt.chat.of_thread("t2")
            if isinstance(e, ReplyToCommand)
        }
        assert replies[refused.action_id].startswith("Not accepted. ⚠ Spindle cannot save")
        assert "Queue:" in replies[status.action_id] and "cannot save" in replies[status.action_id]
        assert rt.refused_unwritable == 1
        _make_room(rt.log)
        await until(lambda: rt.log.unwritable is None)
        await until(lambda: rt.snapshot("t1").counters.completed == 2)  # the held prompt ran
        for thread in ("t1", "t2"):
            await until(lambda t=thread: WRITABLE_AGAIN_NOTICE in rt.chat.texts(t, "notice"))
        await main.say("after")
        await until(lambda: rt.snapshot("t1").counters.completed == 3)
        texts = [e.action.text for e in rt.log.read("t1") if e.action.kind == "user_message"]
        assert texts == ["first", held.text, "after"]  # the refused one never entered
        assert not [e for e in rt.log.read("t1") if e.action.action_id == refused.action_id]
        notices = [
            e for e in rt.chat.of_thread("t1") if isinstance(e, PostOutput) and e.kind == "notice"
        ]
        assert len(notices) >= 2


def test_a_database_another_process_holds_locked_waits_like_a_full_disk(tmp_path: Path) -> None:
    # A `sqlite3` shell left in a write transaction: the flusher used to die on "database is
    # locked", taking the runtime down and the buffered prompts with it.
    import sqlite3

    path = tmp_path / "log.sqlite3"
    log = EventLog(path).open()
    log.append(_status(1))
    log.flush()
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    log.append(_status(2))
    with pytest.raises(LogUnwritable, match="another process holds the database locked"):
        log.flush()
    assert log.statistics().pending == 1 and not log.is_durable(2)
    other.execute("COMMIT")
    other.close()
    assert log.flush() == 1 and log.is_durable(2)
    assert [e.seq for e in log.read("t")] == [1, 2]
    log.close()


@pytest.mark.parametrize("where", ["under a file", "under /proc"])
def test_a_folder_that_cannot_be_made_is_where_the_log_cannot_be_written(
    tmp_path: Path, where: str
) -> None:
    # It was a LogError ("cannot open event log"), reported as a database to repair.
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    path = (a_file if where == "under a file" else Path("/proc/spindle")) / "data" / "log.db"
    with pytest.raises(LogUnwritable, match=r"its folder cannot be made \(") as caught:
        EventLog(path).open()
    assert caught.value.path == path

"""Processes that write as fast as they can (issue 19.1): ``cat /dev/zero`` (one endless line,
no newline ever) and ``yes`` (short lines) run for 20 s at once. Spindle's memory, the output
files on disk, and the time ``/status`` and ``list_processes`` take all stay within the
documented bounds (docs/process-manager.md, "Limits"), and ``stop_process`` stops both. And
with no Spindle at all (killed), an orphaned flood's files stay capped all the same.

Before the fix the manager read each file's whole backlog on the trio thread and held an
unfinished line without limit: its memory grew by gigabytes, ``/status`` took tens of
seconds, and the files passed their 8 MiB cap by far. The loop below gives up at the first
bound broken, so a regression fails in seconds instead of filling the machine."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import trio
from mcp_kit import TOKEN, alive, call, launch_manager, make_config, open_client

from threadspindle.effects.mcp_manager import ProcessManagerConfig, serve_process_manager
from threadspindle.effects.mcp_manager.ring_buffer import LINE_CUT_NOTE

THREAD_ID = "thread-flood"
FLOOD_S = 20.0
SAMPLE_S = 0.25
RSS_GROWTH_BOUND = 64 * 1024 * 1024  # the documented bound for these two processes
ANSWER_BOUND_S = 1.0


def _stream_bytes(data_dir: Path, name: str, stream: str) -> int:
    """What one stream of a process has on disk now, its largest start's: the two newest
    generation files (the writer keeps two, ``output_writer.py``). A listing is no
    snapshot: under load the files are stat'ed one by one while ``yes`` fills a 4 MiB file
    in milliseconds, so a third, older one the writer deletes right after starting a new
    one can be listed and still found full (12.4 MiB was measured so, never on disk at
    once). More than three files listed is a writer that stopped deleting: that is
    reported as no bound at all."""
    starts: dict[str, dict[int, int]] = {}  # a start's base -> generation -> bytes
    for path in data_dir.glob(f"processes/*/{name}.*.{stream}.*.log"):
        base, generation, _ = str(path).rsplit(".", 2)
        try:
            starts.setdefault(base, {})[int(generation)] = path.stat().st_size
        except FileNotFoundError:
            pass  # deleted by a rotation since the listing
    largest = 0
    for sizes in starts.values():
        if len(sizes) > 3:
            return sum(sizes.values()) + 2**62
        largest = max(largest, sum(sizes[n] for n in sorted(sizes)[-2:]))
    return largest


def _writer_pids() -> list[int]:
    """The output writers running now (children of this process, which runs the manager)."""
    pids = []
    for child in psutil.Process().children():
        try:
            if any("output_writer" in part for part in child.cmdline()):
                pids.append(child.pid)
        except psutil.Error:
            pass  # gone, or a zombie left by an earlier test
    return pids


async def test_two_floods_stay_bounded_answer_fast_and_stop(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    config = make_config(tmp_path, poll_interval_s=0.05)
    manager = await nursery.start(serve_process_manager, config)
    me = psutil.Process()
    pids: list[int] = []
    try:
        async with open_client(manager.url, TOKEN, {"X-Spindle-Thread": THREAD_ID}) as client:
            await call(client, "list_processes")  # the SDK and HTTP paths warmed up
            baseline = me.memory_info().rss
            earlier_writers = set(_writer_pids())
            for name, command, args in (("zero", "cat", ["/dev/zero"]), ("yes", "yes", [])):
                started = await call(
                    client,
                    "start_process",
                    name=name,
                    command=command,
                    args=args,
                    cwd=str(tmp_path),
                )
                pids.append(started["pid"])
            peak_rss = baseline
            slowest_status = slowest_list = worst_lag = 0.0
            largest_stream = 0
            end = trio.current_time() + FLOOD_S
            while trio.current_time() < end:
                t0 = time.monotonic()
                status_lines = [
                    p.summary(time.time()) for p in manager.processes_for_thread(THREAD_ID)
                ]
                t1 = time.monotonic()
                with trio.fail_after(30):
                    listed = await call(client, "list_processes")
                t2 = time.monotonic()
                slowest_status = max(slowest_status, t1 - t0)
                slowest_list = max(slowest_list, t2 - t1)
                assert [p["status"] for p in listed["processes"]] == ["running", "running"]
                assert len(status_lines) == 2
                peak_rss = max(peak_rss, me.memory_info().rss)
                for name in ("zero", "yes"):
                    for stream in ("stdout", "stderr"):
                        size = _stream_bytes(config.data_dir, name, stream)
                        largest_stream = max(largest_stream, size)
                # Give up at the first broken bound (before the fix: gigabytes in seconds).
                assert peak_rss - baseline < RSS_GROWTH_BOUND, peak_rss - baseline
                assert largest_stream <= config.max_log_bytes, largest_stream
                assert max(slowest_status, slowest_list) < ANSWER_BOUND_S
                before_sleep = trio.current_time()
                await trio.sleep(SAMPLE_S)
                worst_lag = max(worst_lag, trio.current_time() - before_sleep - SAMPLE_S)
            assert worst_lag < ANSWER_BOUND_S  # the event loop never stalled

            zero = await call(client, "get_output", name="zero", tail=200_000)
            assert LINE_CUT_NOTE.format(limit=config.max_line_bytes) in zero["stdout"]
            assert len(zero["stdout"]) <= config.ring_buffer_chars
            # Right after the reader skipped a backlog (a loaded machine), the tail may be
            # the skip's note alone: read again until lines come after it (yes goes on).
            with trio.fail_after(10):
                while True:
                    yes = await call(client, "get_output", name="yes", tail=200_000)
                    lines = yes["stdout"].split("\n")
                    if "y" in lines:
                        break
                    await trio.sleep(0.1)
            assert all(line in ("y", "") or line.startswith("[spindle: ") for line in lines)
            writers = set(_writer_pids()) - earlier_writers
            assert len(writers) == 2  # one output writer per process

            for name, pid in zip(("zero", "yes"), pids, strict=True):
                with trio.fail_after(15):
                    stopped = await call(client, "stop_process", name=name)
                assert stopped["tree_gone"] is True
                assert stopped["process"]["status"] == "stopped"
                assert not alive(pid)
            with trio.fail_after(5):
                while any(alive(pid) for pid in writers):
                    await trio.sleep(0.05)  # the writers end with their process
            listed = await call(client, "list_processes")
            assert {p["status"] for p in listed["processes"]} == {"stopped"}
        print(
            f"rss growth {(peak_rss - baseline) / 2**20:.1f} MiB, largest stream on disk "
            f"{largest_stream / 2**20:.2f} MiB, slowest /status {slowest_status * 1000:.1f} ms, "
            f"slowest list_processes {slowest_list * 1000:.1f} ms, worst loop lag "
            f"{worst_lag * 1000:.1f} ms"
        )
    finally:
        for pid in pids:  # whatever happened above, leave nothing flooding the machine
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass


async def test_an_orphaned_flood_stays_capped_with_no_spindle_running(tmp_path: Path) -> None:
    """``spindle mcp --keep-on-shutdown`` SIGKILLed while ``yes`` runs (kept, so it outlives
    Spindle): the writer, not Spindle, keeps the cap, so the orphan neither fills the disk
    (70 GB before the fix) nor dies of SIGPIPE; the next manager adopts it and stops it."""
    cap = ProcessManagerConfig().max_log_bytes
    data_dir = tmp_path / "data"
    thread = {"X-Spindle-Thread": THREAD_ID}
    first, url = await launch_manager(tmp_path, "--keep-on-shutdown")
    try:
        async with open_client(url, TOKEN, thread) as client:
            started = await call(
                client, "start_process", name="yes", command="yes", cwd=str(tmp_path)
            )
    finally:
        first.kill()
        await first.wait()
    pid = started["pid"]
    try:
        largest = 0
        # At least 3 s of the orphan writing, and until it wrote plenty: on a loaded machine
        # the writer's own start can take most of those 3 s (a fixed window failed there).
        end = trio.current_time() + 3.0
        with trio.fail_after(60):
            while trio.current_time() < end or largest <= cap // 4:
                largest = max(largest, _stream_bytes(data_dir, "yes", "stdout"))
                assert largest <= cap, largest  # give up at once (before the fix: GB per s)
                await trio.sleep(0.05)
        assert alive(pid)  # still writing: its pipe has a reader, its writer
        assert largest > cap // 4  # and it did write plenty meanwhile

        second, url = await launch_manager(tmp_path)
        try:
            async with open_client(url, TOKEN, thread) as client:
                proc = (await call(client, "list_processes"))["processes"][0]
                assert proc["adopted"] is True and proc["status"] == "running"
                out = await call(client, "get_output", name="yes")
                # Its output reads back: y's, or (the writer keeping the cap behind a
                # ``yes`` on a loaded machine) the note that some were skipped after them.
                assert "y\ny\n" in out["stdout"]
                tail = out["stdout"][-200:]
                assert tail.endswith(("y\n", "written faster than read]\n")), tail
                stopped = await call(client, "stop_process", name="yes")
                assert stopped["tree_gone"] is True
        finally:
            second.kill()
            await second.wait()
        assert not alive(pid)
        assert _stream_bytes(data_dir, "yes", "stdout") <= cap
    finally:
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass

"""`!` shell commands: streamed output in bounded pieces, the time limit, abort stopping the
whole process tree, binary output summarised."""

from __future__ import annotations

import psutil
import trio

from threadspindle.effects.shell_command import ShellLimits, run_shell

FAST = ShellLimits(flush_s=0.05)


async def _run(command, cwd, *, limits=FAST, cancel_after=None):
    pieces: list[tuple[float, str, int]] = []
    scope = trio.CancelScope()

    def report(text: str, binary: int) -> None:
        pieces.append((trio.current_time(), text, binary))

    async with trio.open_nursery() as nursery:
        if cancel_after is not None:

            async def cancel_later() -> None:
                await trio.sleep(cancel_after)
                scope.cancel()

            nursery.start_soon(cancel_later)
        outcome = await run_shell(command, str(cwd), limits=limits, report=report, cancel=scope)
        nursery.cancel_scope.cancel()
    return outcome, pieces


def test_output_streams_while_the_command_runs(tmp_path):
    async def main():
        start = trio.current_time()
        outcome, pieces = await _run("echo first; sleep 0.6; echo second >&2; exit 3", tmp_path)
        assert outcome.outcome == "exited" and outcome.exit_code == 3
        text = "".join(p[1] for p in pieces)
        assert text == "first\nsecond\n"
        first_at = next(t for t, s, _ in pieces if "first" in s)
        assert first_at - start < 0.5  # shown before the command ended
        assert outcome.duration_s >= 0.6

    trio.run(main)


def test_the_command_runs_in_the_workdir(tmp_path):
    async def main():
        _, pieces = await _run("pwd", tmp_path)
        assert "".join(p[1] for p in pieces).strip() == str(tmp_path.resolve())

    trio.run(main)


def _pids_in(path):
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def test_time_limit_stops_the_whole_tree(tmp_path):
    async def main():
        limits = ShellLimits(timeout_s=0.8, flush_s=0.05, stop_grace_s=0.5)
        cmd = "sleep 300 & echo $! > pids; sh -c 'sleep 300' & echo $! >> pids; wait"
        outcome, _ = await _run(cmd, tmp_path, limits=limits)
        assert outcome.outcome == "timed_out" and outcome.exit_code is None
        pids = _pids_in(tmp_path / "pids")
        assert len(pids) == 2
        assert not [
            p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
        ]

    trio.run(main)


def test_abort_kills_the_process_tree(tmp_path):
    async def main():
        cmd = "sleep 300 & echo $! > pids; (sleep 300; echo never) & echo $! >> pids; wait"
        outcome, _ = await _run(cmd, tmp_path, cancel_after=0.5)
        assert outcome.outcome == "aborted"
        assert outcome.duration_s < 10
        pids = _pids_in(tmp_path / "pids")
        assert len(pids) == 2
        assert not [
            p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"
        ]

    trio.run(main)


def test_output_is_bounded_and_binary_summarised(tmp_path):
    async def main():
        limits = ShellLimits(flush_s=0.05, piece_chars=300)
        outcome, pieces = await _run("seq 1 100000", tmp_path, limits=limits)
        assert outcome.exit_code == 0
        assert all(len(t) <= 300 + 40 for _, t, _ in pieces)
        assert "chars skipped" in "".join(t for _, t, _ in pieces)
        assert pieces[-1][1].endswith("100000\n")
        outcome, pieces = await _run("head -c 5000 /dev/urandom", tmp_path, limits=limits)
        assert sum(b for _, _, b in pieces) + sum(len(t.encode()) for _, t, _ in pieces) >= 5000
        assert sum(b for _, _, b in pieces) > 0

    trio.run(main)


def test_a_missing_workdir_fails_cleanly(tmp_path):
    async def main():
        outcome, _ = await _run("true", tmp_path / "gone")
        assert outcome.outcome == "failed" and "gone" in outcome.detail

    trio.run(main)


def test_in_the_agents_sandbox_a_command_sees_its_workdir_only(tmp_path):
    from pathlib import Path

    from threadspindle.effects.sandbox import Sandbox

    bwrap = Path(__file__).resolve().parents[2] / ".tools" / "bubblewrap" / "usr" / "bin" / "bwrap"
    assert bwrap.exists(), "run `make test` (it unpacks Debian's bubblewrap in .tools/)"
    roots = tmp_path / "roots"
    mine, other = roots / "mine", roots / "other"
    mine.mkdir(parents=True)
    other.mkdir()
    (other / "secret.txt").write_text("another thread's")
    sandbox = Sandbox(binary=str(bwrap), roots=(str(roots),))

    async def main():
        limits = ShellLimits(flush_s=0.05, sandbox=sandbox)
        outcome, pieces = await _run(f"ls {roots}; echo ok > made.txt", mine, limits=limits)
        assert outcome.exit_code == 0, pieces
        assert "".join(p[1] for p in pieces).split() == ["mine"]
        assert (mine / "made.txt").read_text() == "ok\n"

    trio.run(main)

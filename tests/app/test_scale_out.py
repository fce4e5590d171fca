"""``spindle cluster dev``: a 3-node JetStream cluster, two runners of one root and the
console gateway, run as the real command. A conversation started and prompted through the
gateway is answered by the echo agent on the serving runner (whichever took the root);
after that runner is killed (SIGKILL), the standby takes the root and the thread over and
answers the next prompt."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from cli_harness import SPINDLE, environment, make_place


class Lines:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.seen: list[str] = []
        self.used: set[int] = set()
        self.queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.queue.put(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = 60) -> str:
        """The first line matching ``pattern`` not matched before (lines of several
        processes interleave: one already read counts)."""
        for i, line in enumerate(self.seen):
            if i not in self.used and re.search(pattern, line):
                self.used.add(i)
                return line
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.queue.get(timeout=0.1)
            except queue.Empty:
                continue
            self.seen.append(line)
            if re.search(pattern, line):
                self.used.add(len(self.seen) - 1)
                return line
        raise AssertionError(f"no line matching {pattern!r} in:\n" + "\n".join(self.seen))

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()


@pytest.mark.timeout(240)
def test_cluster_dev_serves_a_thread_and_the_standby_takes_it_over(tmp_path: Path) -> None:
    place = make_place(tmp_path)
    proc = subprocess.Popen(
        [*SPINDLE, "cluster", "dev", "--root", str(place["work"]), "--dir", str(tmp_path / "c")]
        + ["--lease-ttl", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        cwd=place["work"],
        env=environment(place),
    )
    out = Lines(proc)
    try:
        pids = {
            line.split(":")[0]: int(line.split()[-1])
            for line in (out.wait_for(r"^runner-a: pid \d+"), out.wait_for(r"^runner-b: pid \d+"))
        }
        serving = out.wait_for(r"^runner-[ab]: serving ").split(":")[0]
        standby = "runner-b" if serving == "runner-a" else "runner-a"
        out.wait_for(r"^gateway: ")
        out.send("/start t1")
        out.wait_for(r"^\[t1\] reply: Started echo")
        out.send("t1: first words")
        out.wait_for(r"^\[t1\] .*first")
        os.kill(pids[serving], signal.SIGKILL)
        out.wait_for(rf"^{standby}: serving ")
        out.send("t1: second words")
        out.wait_for(r"^\[t1\] .*second")
        assert proc.stdin is not None
        proc.stdin.close()
        code = proc.wait(60)
        time.sleep(0.2)
        while not out.queue.empty():
            out.seen.append(out.queue.get())
        assert code == 0, "\n".join(out.seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)

"""A small real file system for tests that need a full or read-only disk (imported as
``disk_harness``).

``SmallDisk`` mounts a tmpfs of a few MiB in a mount namespace of its own (``unshare
--user --map-root-user --mount``: works as root and, where unprivileged user namespaces are
allowed, as any user), held open by a ``sleep`` process. Nothing is mounted on the host: the
file system disappears with the holder. Programs run inside the namespace through
``nsenter``; the test reads the files from outside through ``/proc/<holder>/root``. Filling
it is a real ``ENOSPC`` (SQLite's ``SQLITE_FULL``), a remount read-only a real ``EROFS``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["SmallDisk"]


class SmallDisk:
    def __init__(self, mount_point: Path, size_kib: int) -> None:
        self.path = mount_point
        mount_point.mkdir(parents=True, exist_ok=True)
        for tool in ("unshare", "nsenter", "mount", "dd"):
            assert shutil.which(tool), f"{tool} (util-linux/coreutils) is needed for this test"
        self._holder = subprocess.Popen(
            [
                "unshare",
                "--user",
                "--map-root-user",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                'mount -t tmpfs -o size="$1"k tmpfs "$2" && echo ready && exec sleep 3600',
                "sh",
                str(size_kib),
                str(mount_point),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self._holder.stdout is not None
        ready = self._holder.stdout.readline().strip()
        if ready != "ready":
            self._holder.kill()
            _, err = self._holder.communicate()
            raise AssertionError(f"could not mount a small tmpfs in a namespace: {err.strip()}")

    # --- inside the namespace ---------------------------------------------------------------

    def command(self, argv: list[str], cwd: Path | str = "/") -> list[str]:
        holder = str(self._holder.pid)
        return ["nsenter", "-t", holder, "-U", "-m", "--preserve-credentials", f"--wd={cwd}", *argv]

    def popen(self, argv: list[str], cwd: Path | str = "/", **kwargs: Any) -> subprocess.Popen[str]:
        return subprocess.Popen(self.command(argv, cwd), text=True, **kwargs)

    def run(
        self, argv: list[str], cwd: Path | str = "/", **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        kwargs.setdefault("capture_output", True)
        return subprocess.run(self.command(argv, cwd), text=True, **kwargs)

    def fill(self) -> None:
        """Write a filler file until the file system has no byte left."""
        out = self.run(["dd", "if=/dev/zero", f"of={self.path}/filler", "bs=4k"])
        assert "No space left on device" in out.stderr, out.stderr

    def free(self) -> None:
        out = self.run(["rm", "-f", f"{self.path}/filler"])
        assert out.returncode == 0, out.stderr

    def remount(self, mode: str) -> None:
        out = self.run(["mount", "-o", f"remount,{mode}", str(self.path)])
        assert out.returncode == 0, out.stderr

    # --- from outside -----------------------------------------------------------------------

    def outside(self, path: Path) -> Path:
        """``path`` (inside the mount) as the test process can open it."""
        return Path(f"/proc/{self._holder.pid}/root") / path.relative_to("/")

    def close(self) -> None:
        if self._holder.poll() is None:
            os.kill(self._holder.pid, signal.SIGKILL)
        self._holder.wait()
        for stream in (self._holder.stdout, self._holder.stderr):
            if stream is not None:
                stream.close()

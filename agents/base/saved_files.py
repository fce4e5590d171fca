"""Reading a file the agent can reach (a saved attachment in its workdir) from Spindle,
which runs outside any sandbox, without being led elsewhere by the agent.

The agent works in that folder and may, while a prompt waits in the queue, put a symlink in
place of the file or of any folder above it (a planted ``.spindle`` above all), or a FIFO
that would block the open forever. So every component is opened from ``/`` with
``O_NOFOLLOW`` (ingress saves attachments by the same walk, so a saved file is reachable
this way), the file with ``O_NONBLOCK`` too, and only a regular file no larger than the
limit is read, from the descriptor that was checked (no second lookup by name).

A hard link in place of the file is not guarded against here: the agent can only link what
it can see, which under the sandbox excludes Spindle's files and other threads' workdirs
(they are not in its mount namespace, and ``link`` does not cross mounts).
"""

from __future__ import annotations

import os
import stat

__all__ = ["read_without_symlinks"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer (the agent).
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def read_without_symlinks(path: str, max_bytes: int) -> bytes | None:
    """The bytes of the regular file at the absolute ``path``, or None when it is missing,
    not a regular file, larger than ``max_bytes``, or reached through a symlink anywhere."""
    if not os.path.isabs(path):
        return None
    *folders, name = [part for part in os.path.normpath(path).split("/") if part]
    try:
        folder_fd = _open_folder(folders)
    except OSError:
        return None
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=folder_fd)
    except OSError:
        return None
    finally:
        os.close(folder_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
            return None
        return _read_at_most(fd, max_bytes)
    except OSError:
        return None
    finally:
        os.close(fd)


def _open_folder(parts: list[str]) -> int:
    """The folder ``/<parts...>``, each component opened with ``O_NOFOLLOW``: its fd."""
    fd = os.open("/", _DIR_FLAGS)
    try:
        for part in parts:
            next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_at_most(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from ``fd`` (the file may still grow after ``fstat``)."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1024 * 1024))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)

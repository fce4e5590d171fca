"""Spindle's side of a managed process's output: where its files go, and the pipes and the
writer process (``output_writer.py``) that fill them.

A process's stdout and stderr are the write ends of two pipes; their read ends belong to its
writer alone (Spindle closes its copies at once), so the writer sees the end of the output
when the process and every descendant holding the pipes are gone, whatever Spindle does.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import trio

from . import output_writer
from .output_tail import output_files

__all__ = ["delete_output", "output_bases", "start_output_writer"]


def output_bases(data_dir: Path, thread_id: str, name: str) -> tuple[str, str]:
    """The bases of a new start's stdout and stderr files (``<base>.<n>.log``). Thread ids
    are arbitrary text: a digest keeps them out of the file system's way. A token per start
    keeps a writer of an earlier start, still fed by a daemon that outlived its process,
    away from the new files."""
    folder = hashlib.sha256(thread_id.encode()).hexdigest()[:16]
    base = data_dir / "processes" / folder / f"{name}.{secrets.token_hex(4)}"
    return f"{base}.stdout", f"{base}.stderr"


def delete_output(bases: Iterable[str]) -> None:
    """Delete the files of these streams (and a file named exactly like a base: the single
    output file of a record written by a Spindle from before the writer)."""
    for base in bases:
        for path in [base, *output_files(base).values()]:
            try:
                os.unlink(path)
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                pass


async def start_output_writer(
    bases: Sequence[str], file_limit: int
) -> tuple[trio.Process, tuple[int, ...]]:
    """A pipe per base and the writer on their read ends, each file at most ``file_limit``
    bytes. Returns the writer and the pipes' write ends, which the caller hands to the
    process and then closes."""
    read_ends: list[int] = []
    write_ends: list[int] = []
    try:
        for _ in bases:
            read_end, write_end = os.pipe()
            read_ends.append(read_end)
            write_ends.append(write_end)
        Path(bases[0]).parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-I", "-S", output_writer.__file__, str(file_limit)]
        for fd, base in zip(read_ends, bases, strict=True):
            argv += [str(fd), base]
        writer = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=tuple(read_ends),
            env={},
            start_new_session=True,  # outlives Spindle, like the process it serves
        )
    except BaseException:
        for fd in write_ends:
            os.close(fd)
        raise
    finally:
        for fd in read_ends:
            os.close(fd)
    return writer, tuple(write_ends)

"""The exit codes of the ``spindle`` command, in one place (also in docs/commands.md and
README.md): every subcommand returns one of these.

0 success; 1 a runtime failure (the bot stopped on an error, a replay check found a
difference); 2 bad usage or configuration (the message names the key); 3 ``doctor`` found
something that fails; 4 the database is corrupt, locked, not a Spindle log, or has a row
that cannot be read (the message names the file, the thread and the seq); 5 the data
directory cannot be written (disk full, read-only file system, no permission: the message
names the path and the reason); also an output a command writes (``-o FILE``, standard
output) that the disk refuses because it is full or read-only.
"""

from __future__ import annotations

__all__ = [
    "EXIT_DATABASE",
    "EXIT_DOCTOR",
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_STORAGE",
    "EXIT_USAGE",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_DOCTOR = 3
EXIT_DATABASE = 4
EXIT_STORAGE = 5

"""The environment every child process of Spindle starts from: Spindle's own, less its
``SPINDLE_*`` variables.

Those hold Spindle's secrets (the bot tokens, the process manager's operator token, the
cluster password). A child's environment is readable by any process of the same user
(``/proc/<pid>/environ``: ``exec`` resets the non-dumpable flag Spindle sets on itself), and
whatever a child runs (a git hook, a filter an agent configured, a `!` command's build
file) inherits it. So no child gets them, unless the caller passes them on purpose.
"""

from __future__ import annotations

import os

__all__ = ["PRIVATE_PREFIX", "child_environment"]

PRIVATE_PREFIX = "SPINDLE_"


def child_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(PRIVATE_PREFIX)}

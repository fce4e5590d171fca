"""Telling the user the web chat's start address, which carries this start's token.

On a terminal it is printed, as before. Anywhere else (a pipe, a file, systemd's journal,
a container's log) a log would keep it, and an agent that can read that log would have the
chat's token and its host name: a sandboxed agent reads the rest of the file system, the
user's journal included (docs/security.md), and with the token it could drive the chat,
answering its own permission prompts. So there the address goes into a file of the data
dir, which no sandboxed agent sees, readable by its owner alone, and only the file's path
is printed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from threadspindle.ingress.web.host import WebServer

__all__ = ["ADDRESS_FILE", "tell_web_address"]

ADDRESS_FILE = "web-chat-address"


def tell_web_address(
    server: WebServer, data_dir: Path, say: Callable[[str], None], *, terminal: bool
) -> Path | None:
    """Say where the web chat is; returns the file the address was written to, if any."""
    named = server.named_start_url
    url = named or server.start_url
    if terminal:
        say(f"Web chat: {url}")
        say("(open it in a browser on this machine; the token is new at every start)")
        if named is not None:
            # Under 127.0.0.1 (or any name an agent can know) the browser would also send
            # its cookie to every other server there, an agent's dev server included
            # (docs/web.md#security).
            say(
                "(under a name of its own, new at every start, its cookie goes to no other "
                "server; a browser that cannot open the name: put 127.0.0.1 in its place)"
            )
        return None
    path = data_dir / ADDRESS_FILE
    try:
        _write_private(path, url + "\n")
    except OSError as error:
        say(
            f"Web chat: its address could not be written to {path} ({error.strerror or error}),"
            " and it is not printed here, where a log would keep it: start Spindle from a "
            "terminal, or make that file writable and start again."
        )
        return None
    say(
        f"Web chat: its address, with this start's token, is in {path} (readable by you "
        "alone): not printed here, where a log would keep it. The token is new at every start."
    )
    return path


def _write_private(path: Path, text: str) -> None:
    # Not through a link an agent may have put there, and 0600 even when the file was
    # made before with another mode.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(text)

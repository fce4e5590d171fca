"""Where ``spindle run`` tells the web chat's start address (``app/web_address.py``): on a
terminal it is printed; anywhere a log would keep it, it goes into a file of the data dir
that only its owner can read, and only the file's path is printed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from threadspindle.app.web_address import ADDRESS_FILE, tell_web_address
from threadspindle.ingress.web.host import WebServer
from threadspindle.ingress.web.security import own_name

TOKEN = "a-start-token-of-this-test"
SERVER = WebServer("http://127.0.0.1:8750", 8750, TOKEN)
NAMED = f"http://{own_name(TOKEN)}:8750/?token={TOKEN}"


def test_on_a_terminal_the_address_is_printed_under_the_starts_own_name(tmp_path: Path) -> None:
    said: list[str] = []
    assert tell_web_address(SERVER, tmp_path, said.append, terminal=True) is None
    assert said[0] == f"Web chat: {NAMED}"
    assert "new at every start" in said[2]
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_elsewhere_the_address_is_in_a_private_file_and_not_said(tmp_path: Path) -> None:
    said: list[str] = []
    stale = tmp_path / ADDRESS_FILE
    stale.write_text("an older start's address, longer than this one's, made world-readable\n")
    stale.chmod(0o644)
    path = tell_web_address(SERVER, tmp_path, said.append, terminal=False)
    assert path == stale
    assert path.read_text() == NAMED + "\n"  # the old content is gone, not partly kept
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(said) == 1 and str(path) in said[0]
    assert TOKEN not in said[0] and own_name(TOKEN) not in said[0]


def test_a_link_put_in_the_files_place_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("")
    data = tmp_path / "data"
    data.mkdir()
    os.symlink(elsewhere, data / ADDRESS_FILE)
    said: list[str] = []
    assert tell_web_address(SERVER, data, said.append, terminal=False) is None
    assert elsewhere.read_text() == ""  # the token did not go through the link
    assert "could not be written" in said[0] and TOKEN not in said[0]


def test_a_server_off_loopback_is_named_by_its_own_address(tmp_path: Path) -> None:
    server = WebServer("http://192.0.2.7:8750", 8750, TOKEN)
    said: list[str] = []
    path = tell_web_address(server, tmp_path, said.append, terminal=False)
    assert path is not None and path.read_text() == f"http://192.0.2.7:8750/?token={TOKEN}\n"
    said.clear()
    tell_web_address(server, tmp_path, said.append, terminal=True)
    assert said == [
        f"Web chat: http://192.0.2.7:8750/?token={TOKEN}",
        "(open it in a browser on this machine; the token is new at every start)",
    ]

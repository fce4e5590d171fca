"""``store_attachment``: bytes a platform's client already read (WhatsApp, the web chat),
saved by the same rules as a download: inlined when small text, else a new file under
``.spindle/attachments`` named from the message and the cleaned name, never through a
symlink, never over an existing file, never larger than the limit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from threadspindle.ingress.attachments import AttachmentLimits, AttachmentRefused, store_attachment

LIMITS = AttachmentLimits(inline_text_bytes=16, max_bytes=1000)


def _store(workdir: Path, data: bytes, name: str, message_id: str = "m1", kind: str | None = None):
    return store_attachment(
        data,
        filename=name,
        content_type=kind,
        index=0,
        message_id=message_id,
        workdir=str(workdir),
        limits=LIMITS,
    )


def test_small_text_is_inlined_and_the_rest_saved_under_a_clean_name(tmp_path: Path) -> None:
    inline = _store(tmp_path, b"hello\n", "a.txt", kind="text/plain")
    assert inline.inline_text == "hello\n" and inline.path is None
    saved = _store(tmp_path, b"\x89PNG" * 10, "../../etc/passwd x.png", message_id="../../id")
    assert saved.path is not None and saved.name == "passwd_x.png"
    path = Path(saved.path)
    # The message's id, whatever it holds, stays one name inside the folder.
    assert path.parent == tmp_path.resolve() / ".spindle" / "attachments"
    assert path.name == ".._.._id-0-passwd_x.png" and path.read_bytes() == b"\x89PNG" * 10
    again = _store(tmp_path, b"other", "../../etc/passwd x.png", message_id="../../id")
    assert again.path is not None and again.path != saved.path  # the next free name
    assert path.read_bytes() == b"\x89PNG" * 10  # the first one untouched


def test_too_large_and_a_planted_symlink_are_refused_and_write_nothing(tmp_path: Path) -> None:
    with pytest.raises(AttachmentRefused, match="larger than the 1.0 KiB"):
        _store(tmp_path, bytes(2000), "big.bin")
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / ".spindle")
    with pytest.raises(AttachmentRefused, match="symlink"):
        _store(tmp_path, b"x" * 100, "a.bin")
    assert list((tmp_path / "elsewhere").iterdir()) == []

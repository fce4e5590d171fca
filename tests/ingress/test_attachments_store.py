"""``store_attachment``: bytes a platform's client already read (WhatsApp, the web chat),
saved by the same rules as a download: inlined when small text, else a new file under
``.spindle/attachments`` named from the message and the cleaned name, never through a
symlink, never over an existing file, never larger than the limit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from threadspindle.ingress.attachments import (
    AttachmentLimits,
    AttachmentRefused,
    store_attachment,
    store_attachments,
)

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


def test_a_message_is_stored_whole_or_not_at_all(tmp_path: Path) -> None:
    files = [
        ("a.bin", b"x" * 100, None),
        ("b.txt", b"hi", "text/plain"),
        ("c.bin", bytes(2000), None),
    ]
    with pytest.raises(AttachmentRefused, match="'c.bin'"):
        store_attachments(files, message_id="m2", workdir=str(tmp_path), limits=LIMITS)
    assert list((tmp_path / ".spindle" / "attachments").iterdir()) == []  # a.bin removed
    a, b = store_attachments(files[:2], message_id="m2", workdir=str(tmp_path), limits=LIMITS)
    assert a.path is not None and Path(a.path).name == "m2-0-a.bin"
    assert b.inline_text == "hi"

"""A chat message's files, taken in for the agent: small text files inlined into the
prompt, other files saved under ``<workdir>/.spindle/attachments/``. Discord's attachments,
Telegram's photos and documents and Slack's shared files all come here, each platform
saying where to download a file (``RemoteFile``) and with which credentials.

Everything about an attachment is untrusted: its name (a NUL, 300 characters, ``../``,
a name another attachment of the message also has), its size, and the directory it lands
in (the agent works there and may have planted symlinks). So:

- **names** on disk are ``<message id>-<n>-<name>``: ``n`` is the attachment's index in the
  message, so two files of the same name never meet; ``name`` is the file's base name
  with every character but letters, digits, ``.``, ``-``, ``+`` and ``_`` replaced by
  ``_``, leading dots removed (no hidden files, no ``..``) and cut to ``NAME_BYTES``
  bytes (extension kept), ``file`` when nothing is left. The prompt names the file by
  the same cleaned name.
- **symlinks** are never followed: the directories are opened one by one from ``/`` with
  ``O_NOFOLLOW`` (a symlink anywhere on the way, a planted ``.spindle`` above all, refuses
  the message), and the file is created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` relative to
  the opened directory, so nothing that already exists under that name, file or symlink,
  is ever written through (a clash takes the next free name).
- **size**: a file larger than ``max_bytes`` (declared by the platform, or found while it
  streams) is refused; the download streams to disk in pieces of at most ``_FLUSH_BYTES``,
  written by a worker thread, so neither memory nor the event loop depend on its size.

A file that cannot be taken raises ``AttachmentRefused`` with the sentence for the user:
the bot answers the message with it and sends nothing to the agent, so a prompt is never
silently cut from what the user attached.

A download URL may carry a secret (Telegram's holds the bot token): such a platform says
``keep_url=False``, and the URL is never written into the ``Attachment`` (the log, the
prompt); a credential in a header (Slack's bearer token) never is anyway.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from threadspindle.ingress.input_checks import shown
from threadspindle.runtime.core.model import Attachment

__all__ = [
    "AttachmentLimits",
    "AttachmentRefused",
    "FILES_WITH_A_COMMAND",
    "NAME_BYTES",
    "Download",
    "RemoteFile",
    "Source",
    "safe_file_name",
    "save_attachment",
    "store_attachment",
    "store_attachments",
    "take_attachments",
]

# A file with a command as its caption (or message): it would go nowhere, so the message
# is refused rather than the file dropped without a word.
FILES_WITH_A_COMMAND = (
    "⚠ Not sent: a command takes no files. Send the files with a plain message or caption "
    "(ending in ' queue' to queue them)."
)
NAME_BYTES = 120  # of the cleaned name; with "<message id>-<n>-" well under 255
_EXTENSION_CHARS = 16
_FLUSH_BYTES = 1024 * 1024  # bytes buffered before a write (per download)
_CHUNK_BYTES = 64 * 1024
_NAME_TRIES = 100
_UNSAFE = re.compile(r"[^\w.+-]")  # \w: letters and digits of every script, and "_"
_TEXT_TYPES = ("text/", "application/json", "application/x-yaml", "application/xml")
_TEXT_SUFFIXES = (
    ".txt",
    ".md",
    ".py",
    ".json",
    ".yaml",
    ".yml",
    ".toml",
    ".log",
    ".diff",
    ".patch",
)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class AttachmentRefused(Exception):
    """An attachment Spindle will not take; ``str()`` is the sentence for the user."""


@dataclass(frozen=True)
class AttachmentLimits:
    inline_text_bytes: int = 64 * 1024  # text files up to this size are inlined
    max_bytes: int = 25 * 1024 * 1024  # larger files are refused


class RemoteFile(Protocol):
    """A file of a message, where to download it: ``discord.Attachment`` is one; the other
    platforms' files are made into ``Download``s."""

    filename: str
    url: str
    size: int
    content_type: str | None


@dataclass(frozen=True)
class Download:
    """A ``RemoteFile`` built by a platform's ingress (Telegram: from ``getFile``)."""

    filename: str
    url: str
    size: int
    content_type: str | None = None


@dataclass(frozen=True)
class Source:
    """Where a message's files come from: the platform's name for the user's sentences,
    the headers a download needs, and whether the URL may be kept (shown to the agent)."""

    platform: str = "Discord"
    headers: tuple[tuple[str, str], ...] = ()
    keep_url: bool = True
    # What an HTML page in place of the file means (Slack answers a download it refuses
    # with its sign-in page and a 200): said to the user instead of saving that page.
    page_means: str | None = None


def safe_file_name(filename: str, limit: int = NAME_BYTES) -> str:
    """The cleaned base name of ``filename`` (see the module docstring)."""
    name = filename.replace("\\", "/").rsplit("/", 1)[-1]
    name = _UNSAFE.sub("_", name).lstrip(".")
    stem, extension = os.path.splitext(name)
    if len(extension) > _EXTENSION_CHARS:
        stem, extension = name, ""
    while len((stem + extension).encode()) > limit:
        stem = stem[: max(0, len(stem) - max(1, (len(stem) // 8)))]
    return (stem + extension).lstrip(".") or "file"


def _prefix(message_id: int | str) -> str:
    """The message's part of a saved file's name: the platform's id, in the characters a
    name may hold (a platform's id is data too)."""
    return _UNSAFE.sub("_", str(message_id))[:40] or "m"


def _is_text(name: str, content_type: str | None) -> bool:
    return (content_type or "").startswith(_TEXT_TYPES) or name.lower().endswith(_TEXT_SUFFIXES)


def store_attachment(
    data: bytes,
    *,
    filename: str,
    content_type: str | None,
    index: int,
    message_id: int | str,
    workdir: str,
    limits: AttachmentLimits,
) -> Attachment:
    """A file already downloaded (a platform whose client reads media into memory, under
    its own cap): inlined or saved by the same rules as ``take_attachments``. Blocking: call
    it from a worker thread."""
    name = safe_file_name(filename)
    if len(data) > limits.max_bytes:
        raise AttachmentRefused(
            f"The attachment {shown(name)!r} is {_mib(len(data))}: larger than the "
            f"{_mib(limits.max_bytes)} Spindle takes."
        )
    if _is_text(name, content_type) and len(data) <= limits.inline_text_bytes:
        return Attachment(
            name=name,
            content_type=content_type,
            size=len(data),
            inline_text=data.decode("utf-8", errors="replace"),
        )
    folder_fd, folder = _open_attachment_folder(workdir)
    try:
        file_fd, saved_name = _create_exclusive(
            folder_fd, folder, f"{_prefix(message_id)}-{index}-{name}"
        )
        try:
            _write_all(file_fd, data)
        except BaseException:
            os.close(file_fd)
            _unlink_quietly(saved_name, folder_fd)
            raise
        os.close(file_fd)
    finally:
        os.close(folder_fd)
    return Attachment(
        name=name, content_type=content_type, size=len(data), path=os.path.join(folder, saved_name)
    )


def store_attachments(
    files: Sequence[tuple[str, bytes, str | None]],
    *,
    message_id: int | str,
    workdir: str,
    limits: AttachmentLimits,
) -> tuple[Attachment, ...]:
    """A message's files as (name, bytes, content type), each stored by
    ``store_attachment``; when one is refused, those already saved are removed again (the
    message is taken whole or not at all, as by ``take_attachments``). Blocking."""
    found: list[Attachment] = []
    try:
        for index, (filename, data, content_type) in enumerate(files):
            found.append(
                store_attachment(
                    data,
                    filename=filename,
                    content_type=content_type,
                    index=index,
                    message_id=message_id,
                    workdir=workdir,
                    limits=limits,
                )
            )
    except BaseException:
        _remove(workdir, [os.path.basename(a.path) for a in found if a.path is not None])
        raise
    return tuple(found)


def _mib(size: int) -> str:
    """A size for a sentence: in MiB, or in KiB below a tenth of one (not "0.0 MiB")."""
    if size < 1024 * 1024 // 10:
        return f"{size / 1024:.1f} KiB"
    return f"{size / (1024 * 1024):.1f} MiB"


async def take_attachments(
    attachments: Sequence[RemoteFile],
    *,
    message_id: int | str,
    workdir: str | None,
    limits: AttachmentLimits,
    source: Source = Source(),
) -> tuple[Attachment, ...]:
    """Every attachment of a message, inlined or saved; ``AttachmentRefused`` when one
    cannot be (then those already saved are removed again: the message is refused whole).
    Without a workdir yet, files are only named by their URL (when it may be kept; else
    the message is refused: the agent could not reach the file)."""
    if not attachments:
        return ()
    found: list[Attachment] = []
    try:
        async with aiohttp.ClientSession(headers=dict(source.headers)) as session:
            for index, attachment in enumerate(attachments):
                found.append(
                    await _take_one(session, attachment, index, message_id, workdir, limits, source)
                )
    except BaseException:
        saved = [os.path.basename(a.path) for a in found if a.path is not None]
        if saved and workdir is not None:
            await asyncio.get_running_loop().run_in_executor(None, _remove, workdir, saved)
        raise
    return tuple(found)


async def _take_one(
    session: aiohttp.ClientSession,
    attachment: RemoteFile,
    index: int,
    message_id: int | str,
    workdir: str | None,
    limits: AttachmentLimits,
    source: Source,
) -> Attachment:
    name = safe_file_name(attachment.filename)
    content_type = attachment.content_type
    if attachment.size > limits.max_bytes:
        raise AttachmentRefused(
            f"The attachment {shown(name)!r} is {_mib(attachment.size)}: larger than the "
            f"{_mib(limits.max_bytes)} Spindle takes."
        )
    is_text = _is_text(name, content_type)
    inline_text: str | None = None
    path: str | None = None
    if is_text and attachment.size <= limits.inline_text_bytes:
        data = await _read_small(session, attachment.url, limits.inline_text_bytes, name, source)
        inline_text = data.decode("utf-8", errors="replace")
    elif workdir is not None:
        path = await save_attachment(
            session,
            attachment.url,
            workdir=workdir,
            file_name=f"{_prefix(message_id)}-{index}-{name}",
            max_bytes=limits.max_bytes,
            shown_name=name,
            source=source,
        )
    elif not source.keep_url:
        raise AttachmentRefused(
            f"The attachment {shown(name)!r} cannot be passed on: the conversation has no "
            "workdir to save it in."
        )
    return Attachment(
        name=name,
        content_type=content_type,
        size=attachment.size,
        path=path,
        url=attachment.url if source.keep_url else None,
        inline_text=inline_text,
    )


@asynccontextmanager
async def _download(
    session: aiohttp.ClientSession, url: str, name: str, source: Source
) -> AsyncIterator[aiohttp.ClientResponse]:
    """``session.get(url)``, its failures (also while the body streams) refusals naming
    the file; so is a web page where the platform answers a refused download with one."""
    try:
        async with session.get(url) as response:
            response.raise_for_status()
            if (
                source.page_means is not None
                and response.content_type == "text/html"
                and not name.lower().endswith((".html", ".htm"))
            ):
                raise AttachmentRefused(
                    f"{source.platform} answered with a web page instead of the file "
                    f"{shown(name)!r}: {source.page_means}"
                )
            yield response
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise AttachmentRefused(
            f"The attachment {shown(name)!r} could not be downloaded from {source.platform} "
            f"({type(exc).__name__}: {_without_url(exc)})."
        ) from exc


def _without_url(exc: BaseException) -> str:
    """What a download error says, without the URL aiohttp puts in it (Telegram's holds
    the bot token, and the sentence is shown in the chat)."""
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"{exc.status} {exc.message}"
    return str(exc)


async def _read_small(
    session: aiohttp.ClientSession, url: str, limit: int, name: str, source: Source
) -> bytes:
    data = bytearray()
    async with _download(session, url, name, source) as response:
        async for chunk in response.content.iter_chunked(_CHUNK_BYTES):
            data += chunk
            if len(data) > limit:
                raise AttachmentRefused(
                    f"The attachment {shown(name)!r} is larger than {source.platform} said it was."
                )
    return bytes(data)


async def save_attachment(
    session: aiohttp.ClientSession,
    url: str,
    *,
    workdir: str,
    file_name: str,
    max_bytes: int,
    shown_name: str,
    source: Source = Source(),
) -> str:
    """Stream ``url`` into ``<workdir>/.spindle/attachments/`` under ``file_name`` (or the
    next free variant of it); the path written. Never follows a symlink, never writes over
    anything, never holds more than ``_FLUSH_BYTES`` of it in memory; the file system is
    only touched from a worker thread."""
    loop = asyncio.get_running_loop()
    folder_fd, folder = await loop.run_in_executor(None, _open_attachment_folder, workdir)
    try:
        file_fd, saved_name = await loop.run_in_executor(
            None, _create_exclusive, folder_fd, folder, file_name
        )
        try:
            written = 0
            pending = bytearray()
            async with _download(session, url, shown_name, source) as response:
                async for chunk in response.content.iter_chunked(_CHUNK_BYTES):
                    written += len(chunk)
                    if written > max_bytes:
                        raise AttachmentRefused(
                            f"The attachment {shown(shown_name)!r} is larger than the "
                            f"{_mib(max_bytes)} Spindle takes."
                        )
                    pending += chunk
                    if len(pending) >= _FLUSH_BYTES:
                        await loop.run_in_executor(None, _write_all, file_fd, bytes(pending))
                        pending.clear()
            if pending:
                await loop.run_in_executor(None, _write_all, file_fd, bytes(pending))
        except BaseException:
            os.close(file_fd)
            _unlink_quietly(saved_name, folder_fd)
            raise
        os.close(file_fd)
    finally:
        os.close(folder_fd)
    return os.path.join(folder, saved_name)


def _open_attachment_folder(workdir: str) -> tuple[int, str]:
    """``<workdir>/.spindle/attachments`` opened as a directory, every component from
    ``/`` opened with ``O_NOFOLLOW`` (the last two made when missing): its fd and path."""
    if not os.path.isabs(workdir):
        raise AttachmentRefused(f"The workdir {shown(workdir)!r} is not an absolute path.")
    parts = [p for p in os.path.normpath(workdir).split("/") if p]
    fd = os.open("/", _DIR_FLAGS)
    path = "/"
    try:
        for index, part in enumerate([*parts, ".spindle", "attachments"]):
            path = os.path.join(path, part)
            if index >= len(parts):
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise AttachmentRefused(
                        f"Attachments are not saved: {path}: {exc.strerror or exc}."
                    ) from None
            try:
                next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise AttachmentRefused(
                        f"Attachments are not saved: {path} is a symlink or not a directory."
                    ) from None
                raise AttachmentRefused(
                    f"Attachments are not saved: {path}: {exc.strerror or exc}."
                ) from None
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd, path


def _create_exclusive(folder_fd: int, folder: str, file_name: str) -> tuple[int, str]:
    """A new file in the folder named ``file_name``, or ``<stem>-<k><ext>`` when that is
    taken (by anything: a file, a symlink); its fd and name."""
    stem, extension = os.path.splitext(file_name)
    for attempt in range(_NAME_TRIES):
        name = file_name if attempt == 0 else f"{stem}-{attempt}{extension}"
        try:
            return os.open(name, _FILE_FLAGS, 0o644, dir_fd=folder_fd), name
        except FileExistsError:
            continue
        except OSError as exc:
            raise AttachmentRefused(
                f"Could not save an attachment in {folder}: {exc.strerror or exc}."
            ) from None
    raise AttachmentRefused(f"Could not find a free file name in {folder} for {file_name}.")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:  # a full disk, a quota
        raise AttachmentRefused(f"Could not save an attachment: {exc.strerror or exc}.") from None


def _unlink_quietly(name: str, folder_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=folder_fd)
    except OSError:
        pass


def _remove(workdir: str, names: list[str]) -> None:
    """Remove files this message saved (through the same no-follow walk)."""
    try:
        folder_fd, _ = _open_attachment_folder(workdir)
    except AttachmentRefused:
        return
    try:
        for name in names:
            _unlink_quietly(name, folder_fd)
    finally:
        os.close(folder_fd)

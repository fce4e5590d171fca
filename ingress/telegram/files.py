"""Telegram's photos and files for the agent: which files a message carries, which
updates are one album, and their download through the Bot API (``getFile``, then the file
URL, which holds the bot token and so is kept nowhere) into ``ingress.attachments``."""

from __future__ import annotations

from typing import NamedTuple

import trio_asyncio
from telegram import Bot, Message, Update
from telegram.error import TelegramError

from threadspindle.ingress.attachments import (
    AttachmentLimits,
    AttachmentRefused,
    Download,
    Source,
    take_attachments,
)
from threadspindle.ingress.input_checks import shown
from threadspindle.runtime.core.model import Attachment

__all__ = [
    "ALBUM_POLL_S",
    "ALBUM_WAIT_S",
    "TELEGRAM_DOWNLOAD_MAX_BYTES",
    "TelegramFile",
    "album_of",
    "files_of",
    "take_telegram_files",
]

TELEGRAM_DOWNLOAD_MAX_BYTES = 20 * 1024 * 1024  # the Bot API's getFile limit
# An album's parts arrive as separate updates, a moment apart: the first part is held this
# long for the others (polling again every ALBUM_POLL_S), then they go as one prompt.
ALBUM_WAIT_S = 1.0
ALBUM_POLL_S = 0.2


class TelegramFile(NamedTuple):
    file_id: str
    name: str
    size: int
    content_type: str | None


def album_of(update: Update) -> tuple[int, str] | None:
    """(chat, media group) of an update that is part of an album."""
    message = update.message
    if message is None or not message.media_group_id:
        return None
    return message.chat.id, message.media_group_id


def files_of(message: Message) -> list[TelegramFile]:
    """The files a message carries for the agent: a photo at its largest size, a document
    (a GIF's animation comes as one too), a video or an audio file. (A voice message is
    transcribed instead; a sticker is no file for the agent.)"""
    found: list[TelegramFile] = []
    if message.photo:
        photo = max(message.photo, key=lambda p: (p.width * p.height, p.file_size or 0))
        name = f"photo-{photo.file_unique_id}.jpg"
        found.append(TelegramFile(photo.file_id, name, photo.file_size or 0, "image/jpeg"))
    for item, kind in (
        (message.document, "document"),
        (message.video, "video"),
        (message.audio, "audio"),
    ):
        if item is not None:
            name = getattr(item, "file_name", None) or f"{kind}-{item.file_unique_id}"
            found.append(TelegramFile(item.file_id, name, item.file_size or 0, item.mime_type))
    return found


async def take_telegram_files(
    bot: Bot, files: list[TelegramFile], *, message_id: int, workdir: str, max_bytes: int
) -> tuple[Attachment, ...]:
    """The files saved into ``workdir`` (a small text file inlined), at most ``max_bytes``
    and the Bot API's 20 MB each; ``AttachmentRefused`` when one cannot be (a file larger
    than that is refused before any download)."""
    limit = min(max_bytes, TELEGRAM_DOWNLOAD_MAX_BYTES)
    downloads = []
    for file in files:
        if file.size > limit:
            raise AttachmentRefused(
                f"The file {shown(file.name)!r} is {file.size / 1048576:.1f} MiB: larger than "
                f"the {limit / 1048576:.1f} MiB Spindle can take from Telegram."
            )
        try:
            found = await trio_asyncio.aio_as_trio(bot.get_file)(file.file_id)
        except TelegramError as error:
            raise AttachmentRefused(
                f"The file {shown(file.name)!r} could not be fetched from Telegram: {error}."
            ) from None
        if not found.file_path:
            raise AttachmentRefused(f"Telegram gave no download for the file {shown(file.name)!r}.")
        downloads.append(Download(file.name, found.file_path, file.size, file.content_type))
    taken: tuple[Attachment, ...] = await trio_asyncio.aio_as_trio(take_attachments)(
        downloads,
        message_id=f"tg{message_id}",
        workdir=workdir,
        limits=AttachmentLimits(max_bytes=limit),
        # The file URL holds the bot token: never into the log or the prompt.
        source=Source(platform="Telegram", keep_url=False),
    )
    return taken

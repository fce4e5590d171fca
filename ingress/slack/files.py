"""Slack's shared files for the agent: which files a message event names, and their
download with the bot token (scope ``files:read``) into ``ingress.attachments``. The
token goes only to Slack's own file host; a file another service hosts is refused."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import trio_asyncio

from threadspindle.ingress.attachments import (
    AttachmentLimits,
    AttachmentRefused,
    Download,
    Source,
    take_attachments,
)
from threadspindle.ingress.input_checks import shown
from threadspindle.runtime.core.model import Attachment

__all__ = ["FILES_SCOPE_MISSING", "has_files", "take_slack_files"]

# Slack answers a file download it refuses (an app without files:read) with its sign-in
# page and a 200.
FILES_SCOPE_MISSING = (
    "Spindle's Slack app may lack the files:read scope (docs/slack-setup.md); "
    "the file was not passed on."
)
_NOT_HOSTED = ("external", "tombstone", "hidden_by_limit")  # modes with nothing to fetch


def has_files(event: dict[str, Any]) -> bool:
    files = event.get("files")
    return isinstance(files, list) and bool(files)


def slack_hosts(url: str, api_base_url: str) -> bool:
    """Whether ``url`` is one of Slack's own files, over HTTPS (or on the Web API's own
    scheme and host, for a Slack the settings point elsewhere: the tests' fake)."""
    target, api = urlsplit(url), urlsplit(api_base_url)
    if (target.scheme, target.hostname) == ("https", "files.slack.com"):
        return True
    return (target.scheme, target.netloc) == (api.scheme, api.netloc)


def _downloads(event: dict[str, Any], api_base_url: str) -> list[Download]:
    downloads = []
    for entry in event.get("files") or ():
        if not isinstance(entry, dict):
            continue
        name = str(entry.get("name") or entry.get("title") or "file")
        url = entry.get("url_private_download") or entry.get("url_private")
        if entry.get("mode") in _NOT_HOSTED or not (
            isinstance(url, str) and slack_hosts(url, api_base_url)
        ):
            raise AttachmentRefused(
                f"The file {shown(name)!r} is not one Slack hosts, so Spindle cannot "
                "fetch it; upload the file itself."
            )
        size, mimetype = entry.get("size"), entry.get("mimetype")
        downloads.append(
            Download(
                name,
                url,
                size if isinstance(size, int) and size >= 0 else 0,
                mimetype if isinstance(mimetype, str) else None,
            )
        )
    return downloads


async def take_slack_files(
    event: dict[str, Any],
    *,
    workdir: str,
    bot_token: str,
    api_base_url: str,
    max_bytes: int,
) -> tuple[Attachment, ...]:
    """The files shared in the message event, saved into ``workdir`` (a small text file
    inlined); ``AttachmentRefused`` when one cannot be (the message is then not sent,
    rather than sent without what came with it)."""
    if not has_files(event):
        return ()
    taken: tuple[Attachment, ...] = await trio_asyncio.aio_as_trio(take_attachments)(
        _downloads(event, api_base_url),
        message_id=f"sl{event.get('ts', '')}",
        workdir=workdir,
        limits=AttachmentLimits(max_bytes=max_bytes),
        source=Source(
            platform="Slack",
            headers=(("Authorization", f"Bearer {bot_token}"),),
            # Only the bot token opens it: no use to the agent, and not to be shown.
            keep_url=False,
            page_means=FILES_SCOPE_MISSING,
        ),
    )
    return taken

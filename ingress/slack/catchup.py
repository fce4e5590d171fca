"""The catching-up half of ``SlackIngress``: what was said while Spindle was down (the
top-level messages of project channels, the replies in every known Slack thread) read back
with ``conversations.history`` and ``conversations.replies`` and handled as the envelopes
would have been, bounded by ``catch_up_limit`` per channel or thread. What it uses of the
ingress is declared here and kept by ``SlackIngress`` (ingress/slack/bot.py)."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from threadspindle.effects.platform import PlatformError
from threadspindle.effects.slack_platform import (
    SlackPlatform,
    is_working_line,
    parse_thread_id,
    slack_thread_id,
)
from threadspindle.ingress.runtime_port import RuntimePort
from threadspindle.ingress.slack import translate
from threadspindle.ingress.slack.settings import SlackSettings

__all__ = ["SlackCatchUp", "catch_up_limit_notice"]

_log = logging.getLogger(__name__)

T = TypeVar("T")


class SlackCatchUp:
    settings: SlackSettings
    platform: SlackPlatform
    runtime: RuntimePort
    bot_user: str
    caught_up: int  # messages found by catch_up (duplicates included)
    _catching_up: bool  # prompts found by catch_up are queued, not interrupting

    if TYPE_CHECKING:  # implemented by SlackIngress (ingress/slack/bot.py)

        async def handle(self, kind: str, payload: dict[str, Any]) -> str | None: ...

        async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T: ...

        async def _say(self, channel: str, thread_ts: str | None, text: str) -> str | None: ...

    async def catch_up(self, since: float) -> None:
        """What was said while Spindle was down goes in as the envelopes would have: the
        top-level messages of project channels (each starts its conversation), then the
        replies in every known Slack thread, each newer than the last message of that
        channel (thread) the log holds, by Slack's own ``ts``; ``since`` (a little before
        the previous process's last action, by this host's clock) where it holds none."""
        if not self.settings.catch_up:
            return
        snapshots = dict(self.runtime.snapshots())
        for project in self.settings.project_channels:
            channel = project.channel_id
            starts = translate.start_action_id(channel, "")
            oldest = _last_seen(
                (i for state in snapshots.values() for i in state.recent_action_ids), starts
            )
            oldest = since if oldest is None else oldest
            try:
                found, left_out = await self._history(channel, oldest)
            except PlatformError as error:
                _log.warning("could not catch up channel %s: %s", channel, error)
                continue
            await self._caught_up(channel, None, oldest, found)
            if left_out:
                await self._say(channel, None, catch_up_limit_notice(len(found), left_out))
        for thread_id, state in snapshots.items():
            if not thread_id.startswith("sl:") or state.conversation is None:
                continue
            channel, thread_ts = parse_thread_id(thread_id)
            seen = _last_seen(state.recent_action_ids, translate.message_action_id(channel, ""))
            await self._catch_up_thread(channel, thread_ts, since if seen is None else seen)

    async def _history(self, channel: str, oldest: float) -> tuple[list[dict[str, Any]], int]:
        """The oldest ``catch_up_limit`` top-level messages of ``channel`` newer than
        ``oldest``, oldest first, and how many newer ones were left out. Slack pages newest
        first, so every page is read, but no more than the limit is ever held."""
        limit = self.settings.catch_up_limit
        kept: deque[dict[str, Any]] = deque()
        left_out = 0
        cursor: str | None = None
        while True:
            page, cursor = await self._retrying(
                partial(self.platform.history_page, channel, oldest, cursor)
            )
            for message in page:  # each newer than the ones after it
                if self._own(message):
                    continue
                kept.append(message)
                if len(kept) > limit:
                    kept.popleft()  # the newest held
                    left_out += 1
            if cursor is None:
                return sorted(kept, key=lambda m: float(m.get("ts", 0))), left_out

    async def _catch_up_thread(self, channel: str, thread_ts: str, oldest: float) -> None:
        """The thread's replies newer than ``oldest``, a page at a time, up to
        ``catch_up_limit`` of them; past it the thread is told what was not read."""
        limit = self.settings.catch_up_limit
        read = 0
        cursor: str | None = None
        try:
            while True:
                page, cursor = await self._retrying(
                    partial(self.platform.replies_page, channel, thread_ts, oldest, cursor)
                )
                take: list[dict[str, Any]] = []
                over = False
                for message in page:
                    if not _newer(message, oldest) or message.get("ts") == thread_ts:
                        continue
                    if not self._own(message):  # the app's own lines are not counted
                        if read == limit:
                            over = True
                            break
                        read += 1
                    take.append(message)
                await self._caught_up(channel, thread_ts, oldest, take)
                if over:
                    await self._say(channel, thread_ts, catch_up_limit_notice(read, None))
                    return
                if cursor is None:
                    return
        except PlatformError as error:
            _log.warning("could not catch up %s: %s", slack_thread_id(channel, thread_ts), error)

    async def _caught_up(
        self, channel: str, thread_ts: str | None, since: float, messages: list[dict[str, Any]]
    ) -> None:
        for message in messages:
            if message.get("ts") == thread_ts or float(message.get("ts", 0)) <= since:
                continue
            if thread_ts is not None and self._left_working_line(message):
                # A "working…" line of a Spindle killed mid-run: the run it told of is over.
                try:
                    await self.platform.delete(
                        slack_thread_id(channel, thread_ts), str(message.get("ts"))
                    )
                except PlatformError as error:
                    _log.warning("could not delete a left working line: %s", error)
                continue
            self.caught_up += 1
            event = {"type": "message", "channel": channel, **message}
            # Catch-up runs alone, before the socket opens: nothing live is handled meanwhile.
            self._catching_up = True
            try:
                await self.handle("events_api", {"event": event, "team_id": event.get("team")})
            except Exception:  # one bad message must not stop the rest
                _log.exception("could not catch up message %s", message.get("ts"))
            finally:
                self._catching_up = False

    def _own(self, message: Mapping[str, Any]) -> bool:
        return bool(message.get("bot_id")) or message.get("user") == self.bot_user

    def _left_working_line(self, message: Mapping[str, Any]) -> bool:
        return self._own(message) and is_working_line(str(message.get("text") or ""))


def _newer(message: Mapping[str, Any], than: float) -> bool:
    try:
        return float(message.get("ts", 0)) > than
    except (TypeError, ValueError):
        return False


def catch_up_limit_notice(read: int, left_out: int | None) -> str:
    """What a channel or thread is told when more was said while Spindle was down than
    one catch-up reads (``catch_up_limit``)."""
    more = "later ones" if left_out is None else f"the {left_out} after them"
    return (
        f"While Spindle was away more was said here than it catches up on: it read the "
        f"first {read} messages; {more} were not read. Send again what still matters."
    )


def _last_seen(action_ids: Iterable[str], prefix: str) -> float | None:
    """The newest Slack ``ts`` among the action ids ``<prefix><ts>`` (None: none)."""
    newest: float | None = None
    for action_id in action_ids:
        if action_id.startswith(prefix):
            try:
                ts = float(action_id[len(prefix) :])
            except ValueError:
                continue
            newest = ts if newest is None else max(newest, ts)
    return newest

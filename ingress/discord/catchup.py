"""Catching up on what was said while Spindle was away: where it left off, and what to say.

Discord delivers a message once, over the gateway session that is live when it is posted.
A message posted while the bot was stopped, or while it had lost its session (a reconnect
that could not RESUME and got a fresh READY), is never delivered. So on every fresh session
the bot (``SpindleBot.on_connect``) reads what it missed from each open thread's history
and feeds it through the same ingress path as live messages. This module holds how, and
``CatchUpMixin``, the half of ``SpindleBot`` that does it:

- **Where Spindle left off** is derived from the event log, not kept a second time: ingress
  names each action after the Discord id it came from (``msg-<message id>``,
  ``int-<interaction id>``, ``cmp-…``, ``start-…``), and Discord ids (snowflakes) grow with
  time, so the newest of them in a thread's log is the last thing Spindle saw there;
  everything after it in the thread's history is new (``last_seen``). Within one process
  the bot also keeps the newest id it emitted per thread, for what the log does not hold
  yet.
- **Open threads** are the threads whose conversation is on in the runtime's store (not
  ended) and that Discord lists as active (not archived; a message to an archived thread
  makes it active again): ``open_threads`` gives the first half, the bot's cache the other.
- **Project channels** keep no per-channel record: there the bot looks at messages posted
  since the previous process last logged anything (``last_alive``, from the log as it was
  before this process wrote to it) or since this process lost its session, and takes
  those no thread was started from.
- **What to say**: ``catch_up_notice``.
- **Nothing twice**: the catch-up holds its place in the bot's event order, so live events
  of the new session wait behind it; a message both read back and delivered live (posted
  while the history was read) has the same action id both times, and the core drops the
  second delivery; a project-channel message is claimed before any await, so it opens
  one thread.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

import discord

from threadspindle.effects.discord_platform import discord_nonce
from threadspindle.ingress.discord import translate
from threadspindle.ingress.discord.items import Emit, IngressItem
from threadspindle.ingress.discord.settings import DiscordSettings
from threadspindle.ingress.input_checks import InputRefused
from threadspindle.ingress.workspace_commands import shell_action
from threadspindle.runtime.core.actions import Action, SourceMessageDeleted, SourceMessageEdited
from threadspindle.runtime.core.model import Attachment, QueueItem, ThreadState
from threadspindle.runtime.live.log import EventLog

__all__ = [
    "INGRESS_KINDS",
    "CatchUpMixin",
    "LoggedHistory",
    "SeenHistory",
    "catch_up_notice",
    "discord_id",
    "from_a_person",
]

_log = logging.getLogger(__name__)

_READY_WAIT_S = 120.0  # a fresh session's guilds (its active threads) arrive within this
# Project channels are read from a little before Spindle went away: our clock and the one
# in Discord's ids may disagree, and a message seen then already has its thread.
_CLOCK_MARGIN_S = 60.0
_PERSON_MESSAGE_TYPES = (discord.MessageType.default, discord.MessageType.reply)

# The actions ingress makes from Discord messages and interactions (their ids carry the
# Discord id): every kind a person's message or command can become. One missing (a steer,
# a `!` command) was never counted as seen, so each restart's catch-up read those messages
# again and queued them once more.
INGRESS_KINDS = (
    "user_message",
    "queue_command",
    "steer_command",
    "shell_requested",
    "abort",
    "clear_queue",
    "remove_queued",
    "compact",
    "fork",
    "conversation_started",
    "conversation_resumed",
    "conversation_ended",
    "workdir_set",
    "model_changed",
    "policy_set",
    "verbosity_set",
    "status",
    "permission_answered",
    "question_answered",
    "schedule_added",
    "schedule_cancelled",
    "schedules_listed",
    "workspace_command",
)
# Action id prefixes followed by the id of the Discord message or interaction (see
# ``translate`` and ``SpindleBot``); edits and deletes name an older message, so not those.
_ID_PREFIXES = ("msg-", "int-", "cmp-", "start-")


def discord_id(action_id: str) -> int | None:
    """The Discord id an ingress action id was made from, or None."""
    for prefix in _ID_PREFIXES:
        if action_id.startswith(prefix):
            rest = action_id[len(prefix) :]
            return int(rest) if rest.isdigit() else None
    return None


class SeenHistory(Protocol):
    """What the bot asks about where Spindle left off (``LoggedHistory`` answers it)."""

    @property
    def last_alive(self) -> float | None: ...

    def open_threads(self) -> list[str]: ...

    def last_seen(self, thread_id: str) -> int | None: ...


@dataclass(frozen=True)
class LoggedHistory:
    """What the runtime knows of where each thread left off, read from its log and store.

    ``last_alive`` must be read before this process appends anything (the runtime's own
    start-up actions would make it "now")."""

    log: EventLog
    snapshots: Callable[[], Mapping[str, ThreadState]]
    last_alive: float | None

    def open_threads(self) -> list[str]:
        """Discord threads with a conversation on (an ended one has none). The log may hold
        other platforms' threads too (``tg:…``): a Discord thread's id is its snowflake."""
        return [
            t
            for t, state in self.snapshots().items()
            if state.conversation is not None and t.isdigit()
        ]

    def last_seen(self, thread_id: str) -> int | None:
        """The newest Discord id among the thread's logged ingress actions."""
        ids = (discord_id(a) for a in self.log.action_ids(thread_id, INGRESS_KINDS))
        return max((i for i in ids if i is not None), default=None)


def _counted(n: int, noun: str) -> tuple[str, str]:
    """``("1 message", "is")``, ``("2 messages", "are")``."""
    return (f"{n} {noun}", "is") if n == 1 else (f"{n} {noun}s", "are")


def catch_up_notice(
    *, queued: int, not_queued: int = 0, edited: int = 0, removed: int = 0
) -> str | None:
    """What the thread is told was caught up (None: nothing was)."""
    lines = []
    if queued:
        count, verb = _counted(queued, "message")
        lines.append(f"{count} sent while Spindle was offline {verb} queued.")
    if not_queued:
        count, _ = _counted(not_queued, "message")
        lines.append(f"{count} sent while Spindle was offline did not fit in the queue.")
    if edited:
        count, verb = _counted(edited, "queued prompt")
        lines.append(f"{count} edited while Spindle was offline {verb} updated.")
    if removed:
        count, verb = _counted(removed, "queued prompt")
        lines.append(f"{count} deleted while Spindle was offline {verb} removed from the queue.")
    return "\n".join(lines) or None


class CatchUpMixin(discord.Client):
    """The catching-up half of ``SpindleBot``: its gateway-session handlers and what they
    do. What it uses of the bot is declared here and kept by the bot: the state (its
    ``_history``, ``_seen``: per thread, the newest Discord id emitted by this process,
    which the log may not hold yet; ``_offline_since``, ``_caught_up_once``, and the
    ``caught_up`` (messages) and ``catch_ups`` (finished) counts) and the bot's own
    handling of a message."""

    settings: DiscordSettings
    _clock: Callable[[], float]
    _snapshot: Callable[[str], ThreadState | None]
    _history: SeenHistory | None
    _seen: dict[str, int]
    _offline_since: float | None
    _caught_up_once: bool
    _forwarded: OrderedDict[int, bool]
    caught_up: int
    catch_ups: int

    if TYPE_CHECKING:  # implemented by SpindleBot (ingress/discord/bot.py)

        def _ordered(self) -> AbstractAsyncContextManager[Emit]: ...

        def _remember(self, message_id: int, *, queued: bool) -> None: ...

        def has_conversation(self, thread_id: str) -> bool: ...

        def workdir_of(self, thread_id: str) -> str | None: ...

        async def _author_allowed(self, message: discord.Message) -> bool: ...

        async def _answer_message(self, message: discord.Message, text: str) -> None: ...

        async def _attachments(
            self, message: discord.Message, workdir: str | None
        ) -> tuple[Attachment, ...]: ...

        async def _prompt_content(
            self, message: discord.Message, workdir: str | None
        ) -> tuple[str, tuple[Attachment, ...]] | None: ...

        async def _project_message(
            self,
            message: discord.Message,
            agent: str,
            workdir: str,
            emit: Emit,
            *,
            notice: str | None = None,
        ) -> bool: ...

    async def _shell_of(
        self, message: discord.Message, thread_id: str
    ) -> tuple[bool, Action | None]:
        """A ``!`` command in a person's message, live or caught up (the core checks it
        against ``shell_users``): (True, its action); (True, None) when refused, answered
        here; (False, None) when the message is no command."""
        parent = getattr(message.channel, "parent_id", None)
        common = {
            "thread_id": thread_id,
            "action_id": translate.message_action_id(message.id),
            "at": self._clock(),
        }
        try:
            shell = shell_action(
                message.content,
                common,
                str(message.author.id),
                message.author.display_name,
                via_agent=self.settings.shell_via_agent(parent),
            )
        except InputRefused as refused:
            await self._answer_message(message, f"⚠ {refused}")
            return True, None
        return shell is not None, shell

    async def on_disconnect(self) -> None:
        if self._offline_since is None:
            self._offline_since = self._clock()

    async def on_resumed(self) -> None:
        self._offline_since = None  # a clean RESUME: Discord replays what was missed

    async def on_connect(self) -> None:
        """A fresh session (READY after IDENTIFY, at start-up or after a reconnect that
        could not RESUME): what was posted while there was none is never delivered, so
        it is read from the history. This takes its place in line at once, so the new
        session's live events wait behind it, then waits for the guilds: their active
        threads tell which threads are open."""
        if self._history is None:
            return
        async with self._ordered() as emit:
            try:
                await self.wait_for("ready", timeout=_READY_WAIT_S)
                await self._catch_up(emit)
            except Exception:  # live events must go on, whatever went wrong here
                _log.exception("could not catch up on what was posted while offline")

    async def _catch_up(self, emit: Emit) -> None:
        assert self._history is not None
        # Since when project channels went unheard: at start-up, since the previous
        # process's last sign of life (this one may have failed to connect a few times
        # first); later, since this process lost its session.
        since = self._offline_since
        if not self._caught_up_once and self._history.last_alive is not None:
            since = self._history.last_alive
        self._offline_since = None
        self._caught_up_once = True
        for thread_id in self._history.open_threads():
            thread = self.get_channel(int(thread_id))
            # Not in the cache: archived (or gone, or out of reach) on Discord.
            if isinstance(thread, discord.Thread) and not thread.archived:
                try:
                    await self._catch_up_thread(thread, emit)
                except discord.HTTPException as error:
                    _log.warning("could not catch up on thread %s: %s", thread_id, error)
        if since is not None:  # else a first start: no project channel went unheard
            await self._catch_up_projects(since, emit)
        self.catch_ups += 1

    async def _catch_up_projects(self, since: float, emit: Emit) -> None:
        """Open the threads that project-channel messages posted since ``since`` would
        have opened (a message a thread was started from was handled already)."""
        after = discord.Object(
            id=discord.utils.time_snowflake(datetime.fromtimestamp(since - _CLOCK_MARGIN_S, UTC))
        )
        for project in self.settings.project_channels:
            channel = self.get_channel(project.channel_id)
            if not isinstance(channel, discord.TextChannel):
                continue
            try:
                async for message in channel.history(limit=None, after=after, oldest_first=True):
                    if from_a_person(message) and not message.flags.has_thread:
                        notice = catch_up_notice(queued=1)
                        if await self._project_message(
                            message, project.agent, project.workdir, emit, notice=notice
                        ):
                            self.caught_up += 1
            except discord.HTTPException as error:
                _log.warning("could not catch up on channel %s: %s", project.channel_id, error)

    async def _catch_up_thread(self, thread: discord.Thread, emit: Emit) -> None:
        """Queue the thread's unseen messages in order (never interrupting: they were all
        sent before anything runs now), reconcile queued prompts whose messages were
        edited or deleted, and say so in the thread."""
        assert self._history is not None
        thread_id = str(thread.id)
        state = self._snapshot(thread_id)
        if state is None or not self.has_conversation(thread_id):
            return
        last = max(self._seen.get(thread_id, 0), self._history.last_seen(thread_id) or 0)
        if not last:
            return
        # Queued prompts from this thread's own messages (not a project channel's opener):
        # the history is read from the oldest of them, to see their edits and deletes.
        queued = {
            int(source): item
            for item in state.queue
            if (source := item.source_message_id or "").isdigit() and int(source) > thread.id
        }
        room = max(state.policy.queue_limit - len(state.queue), 0)
        actions: list[Action] = []
        present: set[int] = set()
        new = not_queued = edited = removed = 0
        newest = last
        start = min([last, *(message_id - 1 for message_id in queued)])  # after: exclusive
        try:
            async for message in thread.history(
                limit=None, after=discord.Object(id=start), oldest_first=True
            ):
                newest = max(newest, message.id)
                if message.id in queued:
                    present.add(message.id)
                    change = self._reconcile(thread_id, message, queued[message.id])
                    if change is not None:
                        actions.append(change)
                        removed += isinstance(change, SourceMessageDeleted)
                        edited += not isinstance(change, SourceMessageDeleted)
                elif message.id > last and from_a_person(message):
                    if not await self._author_allowed(message):
                        continue
                    if message.stickers and not message.content.strip():
                        if not message.attachments:
                            continue  # a reaction, as live
                    if new >= room:
                        not_queued += 1
                        continue
                    # A `!` command is one, as live: the core checks who may run it (as a
                    # prompt, it went to the agent without that check).
                    command, shell = await self._shell_of(message, thread_id)
                    if command:
                        if shell is not None:
                            self._remember(message.id, queued=False)
                            actions.append(shell)
                            new += 1
                        continue
                    # Answered as a live message is when it cannot be sent; a voice
                    # message is transcribed.
                    content = await self._prompt_content(message, self.workdir_of(thread_id))
                    if content is None:
                        continue
                    text, attachments = content
                    # A steer has no turn to join after a restart: its text is queued.
                    text = translate.split_queue_suffix(text, self.settings.steer_suffix)[0]
                    prompt = translate.message_action(
                        thread_id=thread_id,
                        message_id=message.id,
                        author_id=message.author.id,
                        author_name=message.author.display_name,
                        text=text,
                        at=self._clock(),
                        attachments=attachments,
                        suffix=self.settings.queue_suffix,
                    )
                    self._remember(message.id, queued=not prompt.interrupt)
                    actions.append(prompt.replace(interrupt=False))
                    new += 1
        except discord.HTTPException as error:
            # What was read is fed in; nothing is taken for deleted (it may be unread).
            _log.warning("could not read all of thread %s: %s", thread_id, error)
        else:
            for message_id in queued.keys() - present:  # the whole range was read: deleted
                self._forwarded.pop(message_id, None)
                actions.append(
                    translate.delete_action(
                        thread_id=thread_id, message_id=message_id, at=self._clock()
                    )
                )
                removed += 1
        notice = catch_up_notice(queued=new, not_queued=not_queued, edited=edited, removed=removed)
        if notice is not None:
            try:
                await thread.send(
                    notice,
                    allowed_mentions=discord.AllowedMentions.none(),
                    nonce=discord_nonce(f"catch-up/{thread_id}/{newest}"),
                )
            except discord.HTTPException as error:
                _log.warning("could not post the catch-up notice in %s: %s", thread_id, error)
        if actions:
            parent = str(thread.parent_id) if thread.parent_id else None
            await emit(IngressItem(tuple(actions), channel_id=parent))
        # Whatever was read is seen now: the next catch-up in this process starts after it.
        self._seen[thread_id] = max(self._seen.get(thread_id, 0), newest)
        self.caught_up += new
        if new or edited or removed:
            _log.info(
                "caught up on thread %s: %d new, %d edited, %d deleted, %d over the queue limit",
                thread_id,
                new,
                edited,
                removed,
                not_queued,
            )

    def _reconcile(
        self, thread_id: str, message: discord.Message, item: QueueItem
    ) -> Action | None:
        """The edit (or withdrawal) of a queued prompt whose message changed meanwhile;
        the message is remembered so that its live edits and deletes count from now on."""
        suffixed = translate.split_queue_suffix(message.content, self.settings.queue_suffix)[1]
        was_suffixed = self._forwarded.get(message.id)
        self._remember(message.id, queued=suffixed)
        change = translate.edit_action(
            thread_id=thread_id,
            message_id=message.id,
            text=message.content,
            # Whether it carried the suffix is known only to the process that forwarded
            # it; after a restart an edit is an edit, never a withdrawal.
            was_queued=bool(was_suffixed),
            at=self._clock(),
            edit_stamp=message.edited_at.isoformat() if message.edited_at else "",
            suffix=self.settings.queue_suffix,
        )
        if isinstance(change, SourceMessageEdited) and change.text == item.text:
            return None  # unchanged
        return change


def from_a_person(message: discord.Message) -> bool:
    """A message someone typed: not a bot's or a webhook's, not a system message."""
    return (
        not message.author.bot
        and message.webhook_id is None
        and message.type in _PERSON_MESSAGE_TYPES
    )

"""``TelegramIngress``: Telegram updates -> runtime actions, by long polling with the offset
committed only once each update's action is durable.

Telegram's ``getUpdates`` is consume-once: an update is gone once a later call names an
offset above its id. So the loop (``poll``) handles one update at a time, waits until what
it posted is in the durable log (``Receipt.durable``), and only then moves the offset past
it; the next ``getUpdates`` confirms it. A crash before that leaves the update with
Telegram, which delivers it again to the next process; its action ids come from Telegram's
ids (``translate``), so an update handled but not yet confirmed when the process died is
dropped by the core as a duplicate. Nothing is lost and nothing is done twice, and updates
sent while Spindle was down are simply the first ones the next process gets.

It makes no decisions of its own; what it does itself, because only Telegram can do it:

- access control: only allow-listed users, in private chats, allow-listed groups and
  project groups; a refused user is told once in a while, in a private chat or by a
  direct message (never in front of a group), a refused button press gets an alert only
  its presser sees; other bots are ignored;
- opening a forum topic for ``/<agent> start`` in a forum's General topic and for a
  message in a project group's General topic (the action needs the topic's id), once
  even when the update comes again;
- answering button presses (Telegram wants an answer at once): a prompt that is no longer
  pending is said so, and nothing is posted; "Remove from queue" is answered by the core's
  reply;
- commands in Telegram's spelling (``translate.COMMANDS``; no hyphens: ``/clear_queue``)
  and the trailing `` queue``; an edit of a forwarded message updates its queued prompt;
- photos and files for the agent (``ingress.attachments``), an album's parts (separate
  updates) gathered into one prompt (``_handle_batch``).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import trio
import trio_asyncio
from telegram import Bot, CallbackQuery, Message, Update, User, Voice
from telegram.error import RetryAfter, TelegramError

from threadspindle.effects.platform import PlatformError
from threadspindle.effects.telegram_platform import TelegramPlatform, telegram_thread_id
from threadspindle.ingress.agent_commands import conversations_text, start_or_resume
from threadspindle.ingress.attachments import FILES_WITH_A_COMMAND, AttachmentRefused
from threadspindle.ingress.discord.translate import resolve_workdir, split_queue_suffix
from threadspindle.ingress.input_checks import InputRefused
from threadspindle.ingress.refusal_notes import RefusalNotes
from threadspindle.ingress.runtime_port import RuntimePort
from threadspindle.ingress.telegram import translate
from threadspindle.ingress.telegram.files import (
    ALBUM_POLL_S,
    ALBUM_WAIT_S,
    TelegramFile,
    album_of,
    files_of,
    take_telegram_files,
)
from threadspindle.ingress.telegram.settings import TelegramSettings
from threadspindle.ingress.thread_commands import command_list, thread_action, typed_prompt
from threadspindle.ingress.transcribe import (
    TRANSCRIBING,
    Transcriber,
    TranscriptionFailed,
    transcript_notice,
)
from threadspindle.ingress.workspace_commands import is_shell_text, new_thread_worktree
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.model import Attachment

__all__ = ["ALLOWED_UPDATES", "REFUSAL", "RuntimePort", "TelegramIngress", "help_text"]

_log = logging.getLogger(__name__)

T = TypeVar("T")

REFUSAL = "You are not allowed to drive agents here. Ask the bot's owner to add you."
NO_LONGER_PENDING = "That prompt is no longer pending."
ALLOWED_UPDATES = ("message", "edited_message", "callback_query")
BATCH = 32  # updates per getUpdates: far fewer than the core remembers per thread
_REMEMBERED = 2048


def help_text(agents: tuple[str, ...]) -> str:
    names = " | ".join(f"/{agent}" for agent in agents)
    return (
        'Plain messages are prompts for this topic\'s agent (a message ending in " queue" '
        'waits its turn instead of interrupting, one ending in " steer" is added to the '
        "running turn; !<command> runs a shell command).\n"
        f"{names} start [workdir] | resume <id> [workdir] | conversations\n"
        + command_list()
        + " · /help"
    )


class TelegramIngress:
    def __init__(
        self,
        settings: TelegramSettings,
        bot: Bot,
        platform: TelegramPlatform,
        runtime: RuntimePort,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        # Voice messages: transcribed into the prompt (ingress/transcribe.py), if set up.
        self.transcriber = (
            Transcriber(settings.transcription) if settings.transcription is not None else None
        )
        self.bot = bot
        self.platform = platform
        self.runtime = runtime
        self._clock = clock
        self.username = bot.username if bot.username else ""
        self.offset: int | None = None  # the next getUpdates' offset: every id below is done
        # Messages forwarded as prompts: (chat, message) -> (thread, whether it was queued).
        self._forwarded: OrderedDict[tuple[int, int], tuple[str, bool]] = OrderedDict()
        self._told = RefusalNotes(settings.refusal_interval_s)  # who was told they are refused
        self.handled = 0  # updates handled
        # An album's (chat, media group) -> when its first part was seen (``_handle_batch``);
        # the albums already sent as a prompt (a part that comes later is queued behind it).
        self._albums: OrderedDict[tuple[int, str], float] = OrderedDict()
        self._sent_albums: OrderedDict[tuple[int, str], None] = OrderedDict()
        self.refusals = 0
        self.polls = 0

    # --- the loop ------------------------------------------------------------------------

    async def poll(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Long polling until cancelled; see the module docstring for the offset rule."""
        task_status.started()
        backoff = 0.5
        while True:
            try:
                updates = await trio_asyncio.aio_as_trio(self.bot.get_updates)(
                    offset=self.offset,
                    limit=BATCH,
                    timeout=int(self.settings.poll_timeout_s),
                    allowed_updates=list(ALLOWED_UPDATES),
                )
                self.polls += 1
                backoff = 0.5
            except RetryAfter as error:
                await trio.sleep(_seconds(error.retry_after))
                continue
            except (TelegramError, OSError) as error:  # network, 5xx, a conflicting poller
                _log.warning("getUpdates failed (%s); again in %.1f s", error, backoff)
                await trio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            await self._handle_batch(updates)

    async def _handle_batch(self, updates: Sequence[Update]) -> None:
        """Handle the updates in order, moving the offset past each once it is done. An
        album's parts (one message each, consecutive) are handled together, as one
        prompt; when the batch ends inside an album that began less than ``ALBUM_WAIT_S``
        ago, its parts are left for the next ``getUpdates`` (the offset stays before
        them, so Telegram hands them over again, with the parts that came meanwhile)."""
        index = 0
        while index < len(updates):
            update = updates[index]
            album = album_of(update)
            parts = [update]
            if album is not None:
                while index + len(parts) < len(updates) and (
                    album_of(updates[index + len(parts)]) == album
                ):
                    parts.append(updates[index + len(parts)])
                now = trio.current_time()
                first_seen = self._albums.setdefault(album, now)
                if index + len(parts) == len(updates) and now - first_seen < ALBUM_WAIT_S:
                    await trio.sleep(ALBUM_POLL_S)
                    return  # polled again at once: those parts are still Telegram's
                self._albums.pop(album, None)
            try:
                if album is not None:
                    self.handled += len(parts)
                    await self._album(
                        [p.message for p in parts if p.message is not None],
                        rest=album in self._sent_albums,
                    )
                    self._sent_albums[album] = None
                else:
                    await self.handle(update)
            except Exception:  # one bad update must not stop the bot (nor repeat forever)
                _log.exception("could not handle update %s", update.update_id)
            self.offset = parts[-1].update_id + 1
            index += len(parts)
        # Albums seen but never finished (a part lost), and sent ones: not kept for ever.
        for albums in (self._albums, self._sent_albums):
            while len(albums) > _REMEMBERED:
                albums.popitem(last=False)

    async def confirm(self) -> None:
        """Tell Telegram the handled updates are done (at a clean stop), so the next process
        is not handed them again (it would drop them, but need not read them)."""
        if self.offset is None:
            return
        await trio_asyncio.aio_as_trio(self.bot.get_updates)(
            offset=self.offset, limit=1, timeout=0, allowed_updates=list(ALLOWED_UPDATES)
        )

    async def handle(self, update: Update) -> None:
        self.handled += 1
        if update.callback_query is not None:
            await self._callback(update.callback_query)
        elif update.edited_message is not None:
            await self._edited(update.edited_message)
        elif update.message is not None:
            await self._message(update.message)

    # --- plumbing --------------------------------------------------------------------------

    async def _post(self, *actions: A.Action, channel_id: str | None = None) -> None:
        """Post in order and return once each is durable: only then may the offset move."""
        for action in actions:
            receipt = await self.runtime.post(action, channel_id=channel_id)
            await receipt.durable()

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """A platform call made by ingress itself, through 429s and short outages."""
        for attempt in range(6):
            try:
                return await call()
            except PlatformError as error:
                if not error.retryable or attempt == 5:
                    raise
                await trio.sleep(error.retry_after or min(0.5 * 2**attempt, 8.0))
        raise AssertionError("unreachable")

    async def _say(self, thread_id: str, text: str, *, reply_to: int | None = None) -> None:
        """An answer of ingress's own (help, a refused value), logged if it cannot go."""
        try:
            await self._retrying(lambda: self.platform.say(thread_id, text, reply_to=reply_to))
        except PlatformError as error:
            _log.warning("could not answer in %s: %s", thread_id, error)

    def _remember(self, chat: int, message_id: int, thread_id: str, queued: bool) -> None:
        self._forwarded[(chat, message_id)] = (thread_id, queued)
        while len(self._forwarded) > _REMEMBERED:
            self._forwarded.popitem(last=False)

    def _has_conversation(self, thread_id: str) -> bool:
        state = self.runtime.snapshot(thread_id)
        return state is not None and state.conversation is not None

    def _workdir(self, thread_id: str | None) -> str:
        state = self.runtime.snapshot(thread_id) if thread_id else None
        if state is not None and state.conversation is not None:
            return state.conversation.workdir
        return self.settings.default_workdir

    def _already(self, action_id: str) -> str | None:
        """The thread whose log already holds ``action_id`` (a redelivered update that
        opened a topic must not open a second one)."""
        for thread_id, state in self.runtime.snapshots().items():
            if action_id in state.recent_action_ids:
                return thread_id
        return None

    async def _allowed(self, user: User, chat_id: int, private: bool) -> bool:
        self.platform.remember_name(user.id, user.first_name or user.username or str(user.id))
        if self.settings.is_allowed(user.id) and self.settings.serves_chat(chat_id, private):
            return True
        self.refusals += 1
        _log.info("ignoring user %s in chat %s: not allow-listed", user.id, chat_id)
        now = self._clock()
        if self._told.due(user.id, now):
            # Told where only they read it: their private chat with the bot. In a group a
            # bot may only write to someone who has opened a chat with it; if not, quiet.
            await self._say(telegram_thread_id(user.id), REFUSAL)
        return False

    # --- messages ----------------------------------------------------------------------------

    async def _album(self, parts: list[Message], *, rest: bool) -> None:
        """An album's parts as one message: the first part's (its id names the prompt),
        every caption, every part's file. ``rest``: parts that came after the album was
        sent (held up past ``ALBUM_WAIT_S``): queued behind it, never interrupting it."""
        captions = [p.caption for p in parts if p.caption and p.caption.strip()]
        files = [f for p in parts for f in files_of(p)]
        await self._message(parts[0], text="\n\n".join(captions), files=files, queued=rest)

    async def _message(
        self,
        message: Message,
        *,
        text: str | None = None,
        files: list[TelegramFile] | None = None,
        queued: bool = False,
    ) -> None:
        """A message: ``text`` and ``files`` stand for its own when given (an album);
        ``queued``: a prompt that waits its turn whatever ``plain_message`` says."""
        user, chat = message.from_user, message.chat
        if text is None:
            text = message.text or message.caption or ""
        voice = message.voice
        if files is None:
            files = files_of(message)
        if user is None or user.is_bot or (not text.strip() and voice is None and not files):
            return
        private = chat.type == "private"
        topic = message.message_thread_id if message.is_topic_message else None
        thread_id = translate.thread_of(chat.id, chat.type, bool(chat.is_forum), topic)
        command = translate.parse_command(text, self.username)
        if text.startswith("/") and command is None:
            return  # a command for another bot
        if not await self._allowed(user, chat.id, private):
            return
        if command is not None:
            try:
                if files:
                    raise InputRefused(FILES_WITH_A_COMMAND)
                await self._command(message, command, thread_id)
            except InputRefused as refused:
                where = thread_id or telegram_thread_id(chat.id)
                await self._say(where, str(refused), reply_to=message.message_id)
            return
        in_conversation = thread_id is not None and self._has_conversation(thread_id)
        project = self.settings.project_group(chat.id) if thread_id is None else None
        if voice is not None and (in_conversation or project is not None):
            # The transcript is the prompt; the audio itself never reaches the agent.
            where = thread_id or telegram_thread_id(chat.id)
            transcript = await self._transcribe(message, where, voice)
            if transcript is None:
                return
            text = transcript
        if thread_id is not None and self._has_conversation(thread_id):
            await self._prompt(message, thread_id, text, files, queued=queued)
        elif thread_id is None and (project := self.settings.project_group(chat.id)):
            await self._project_message(message, project.agent, project.workdir, text, files)
        elif thread_id is not None:
            hint = "No conversation here yet: start one with /claude start [workdir] (or /help)."
            await self._say(thread_id, hint, reply_to=message.message_id)

    async def _transcribe(self, message: Message, thread_id: str, voice: Voice) -> str | None:
        """The topic shows "🎤 Transcribing…", then the transcript (or why there is none);
        the transcript, or None when the message is not sent to the agent."""
        if self.transcriber is None:
            await self._say(
                thread_id,
                "⚠ Not sent to the agent: voice messages need a transcription endpoint "
                "([transcription] in Spindle's config).",
                reply_to=message.message_id,
            )
            return None
        try:
            status = await self._retrying(
                lambda: self.platform.say(thread_id, TRANSCRIBING, reply_to=message.message_id)
            )
        except PlatformError as error:
            _log.warning("could not show the transcription status: %s", error)
            status = None
        try:
            if (voice.file_size or 0) > self.transcriber.config.max_bytes:
                raise TranscriptionFailed(
                    f"the voice message is too long ({voice.file_size} bytes)"
                )
            aio = trio_asyncio.aio_as_trio
            file = await aio(self.bot.get_file)(voice.file_id)
            audio = bytes(await aio(file.download_as_bytearray)())
            text = await self.transcriber.transcribe(audio, "voice.ogg", voice.mime_type)
            notice = transcript_notice(text)
        except (TranscriptionFailed, TelegramError) as error:
            _log.warning("could not transcribe voice message %s: %s", message.message_id, error)
            text, notice = None, f"⚠ Could not transcribe the voice message: {error}"
        if status is not None:
            try:
                await self._retrying(lambda: self.platform.edit(thread_id, status, notice))
            except PlatformError as error:
                _log.warning("could not show the transcript: %s", error)
        return text

    async def _attachments(
        self, message: Message, thread_id: str, files: list[TelegramFile]
    ) -> tuple[Attachment, ...] | None:
        """The message's photos and files for the agent (``telegram.files``); None when
        one cannot be taken (the topic is told why, and nothing goes to the agent: a prompt
        is never sent without what came with it)."""
        if not files:
            return ()
        try:
            return await take_telegram_files(
                self.bot,
                files,
                message_id=message.message_id,
                workdir=self._workdir(thread_id),
                max_bytes=self.settings.attachment_max_bytes,
            )
        except AttachmentRefused as refused:
            await self._say(
                thread_id, f"⚠ Not sent to the agent: {refused}", reply_to=message.message_id
            )
            return None

    async def _prompt(
        self,
        message: Message,
        thread_id: str,
        text: str,
        files: list[TelegramFile] | None = None,
        *,
        queued: bool = False,
    ) -> None:
        user = message.from_user
        assert user is not None
        files = files_of(message) if files is None else files
        if files and is_shell_text(text):
            # A `!` command takes no files: refused before any is saved (else saved, then
            # dropped without a word when the caption became the command).
            await self._say(thread_id, FILES_WITH_A_COMMAND, reply_to=message.message_id)
            return
        attachments = await self._attachments(message, thread_id, files)
        if attachments is None:
            return
        common = {
            "thread_id": thread_id,
            "action_id": translate.message_action_id(message.chat.id, message.message_id),
            "at": self._clock(),
        }
        try:
            group = self.settings.project_group(message.chat.id)
            action = typed_prompt(
                text,
                common,
                author_id=str(user.id),
                author_name=user.first_name or user.username or str(user.id),
                source_message_id=str(message.message_id),
                queue_suffix=self.settings.queue_suffix,
                steer_suffix=self.settings.steer_suffix,
                mode="queue" if queued else self.settings.plain_message,
                shell_via_agent=group.shell_via_agent if group is not None else None,
                attachments=attachments,
            )
        except InputRefused as refused:  # a shell command too long
            await self._say(thread_id, str(refused), reply_to=message.message_id)
            return
        if isinstance(action, A.ShellRequested):  # "!<command>": a shell command, no prompt
            await self._post(action, channel_id=telegram_thread_id(message.chat.id))
            return
        queued = isinstance(action, A.UserMessage) and not action.interrupt
        self._remember(message.chat.id, message.message_id, thread_id, queued)
        await self._post(action, channel_id=telegram_thread_id(message.chat.id))

    async def _open_topic(self, chat_id: int, name: str) -> str:
        topic = await self._retrying(lambda: self.platform.create_topic(chat_id, name))
        return telegram_thread_id(chat_id, topic)

    async def _project_message(
        self,
        message: Message,
        agent: str,
        workdir: str,
        text: str,
        files: list[TelegramFile] | None = None,
    ) -> None:
        """A message in a project group's General topic: a topic named after it, its
        conversation started there, the message its first prompt."""
        chat_id = message.chat.id
        start_id = translate.start_action_id(chat_id, message.message_id)
        thread_id = self._already(start_id)
        if thread_id is None:
            name = (text.strip().splitlines() or [agent])[0][:100] or agent
            try:
                thread_id = await self._open_topic(chat_id, name)
            except PlatformError as error:
                _log.warning("could not open a topic for message %s: %s", message.message_id, error)
                return
        start = A.ConversationStarted(
            thread_id=thread_id,
            action_id=start_id,
            at=self._clock(),
            agent=agent,
            requested_workdir=workdir,
            resolved_workdir=resolve_workdir(workdir, self.settings.default_workdir),
        )
        await self._post(start, channel_id=telegram_thread_id(chat_id))
        project = self.settings.project_group(chat_id)
        if project is not None and project.worktree:
            # Its own worktree first: the prompt waits in the queue until it is made.
            await self._post(new_thread_worktree(thread_id, self._clock()))
        await self._prompt(message, thread_id, text, files)

    async def _edited(self, message: Message) -> None:
        forwarded = self._forwarded.get((message.chat.id, message.message_id))
        if forwarded is None or message.text is None:
            return  # not a prompt of ours (this process's), or not text
        thread_id, was_queued = forwarded
        edit_date = int(message.edit_date.timestamp()) if message.edit_date else 0
        action = translate.edit_action(
            thread_id=thread_id,
            chat_id=message.chat.id,
            message_id=message.message_id,
            text=message.text,
            was_queued=was_queued,
            edit_date=edit_date,
            at=self._clock(),
            suffix=self.settings.queue_suffix,
        )
        queued = split_queue_suffix(message.text, self.settings.queue_suffix)[1]
        self._remember(message.chat.id, message.message_id, thread_id, queued)
        await self._post(action)

    # --- commands -------------------------------------------------------------------------------

    async def _command(
        self, message: Message, command: translate.ParsedCommand, thread_id: str | None
    ) -> None:
        user = message.from_user
        assert user is not None
        name, args = command.name, command.args
        words = args.split()
        agent, _, sub = name.partition("_")  # /claude_start as well as /claude start
        if agent in self.settings.agents:
            if not sub and words and words[0].lower() in ("start", "resume", "conversations"):
                sub, args = words[0].lower(), args[len(words[0]) :].strip()
            await self._agent_command(message, agent, sub or "start", args, thread_id)
            return
        if name in ("help", "start"):
            await self._say(
                thread_id or telegram_thread_id(message.chat.id),
                help_text(self.settings.agents),
                reply_to=message.message_id,
            )
            return
        if thread_id is None or not self._has_conversation(thread_id):
            where = thread_id or telegram_thread_id(message.chat.id)
            await self._say(
                where,
                "No conversation here: start one with /claude start [workdir] (or /help).",
                reply_to=message.message_id,
            )
            return
        common: dict[str, Any] = {
            "thread_id": thread_id,
            "action_id": translate.message_action_id(message.chat.id, message.message_id),
            "at": self._clock(),
        }
        action = thread_action(
            name,
            args,
            common,
            author_id=str(user.id),
            author_name=user.first_name or user.username or str(user.id),
            source_message_id=str(message.message_id),
            workdir=self._workdir(thread_id),
        )
        await self._post(action, channel_id=telegram_thread_id(message.chat.id))

    async def _agent_command(
        self, message: Message, agent: str, sub: str, args: str, thread_id: str | None
    ) -> None:
        chat = message.chat
        here = thread_id or telegram_thread_id(chat.id)
        if sub == "conversations":
            text = conversations_text(agent, self._workdir(thread_id), f"/{agent} resume <id>")
            await self._say(here, text, reply_to=message.message_id)
            return
        session, requested = start_or_resume(
            agent, sub, args, self.settings.default_workdir, f"/{agent}"
        )
        resolved = resolve_workdir(requested, self._workdir(thread_id))
        action_id = translate.message_action_id(chat.id, message.message_id)
        if thread_id is None:
            # In a forum's General topic: the conversation gets a topic of its own.
            thread_id = self._already(action_id)
            if thread_id is None:
                try:
                    thread_id = await self._open_topic(chat.id, f"{agent}: {requested}"[:100])
                except PlatformError as error:
                    await self._say(
                        here,
                        f"Could not open a topic here: {error}. The bot needs the Manage "
                        "Topics right in this group.",
                        reply_to=message.message_id,
                    )
                    return
        common: dict[str, Any] = {
            "thread_id": thread_id,
            "action_id": action_id,
            "at": self._clock(),
            "agent": agent,
            "requested_workdir": requested,
            "resolved_workdir": resolved,
        }
        action: A.Action
        if session is not None:
            action = A.ConversationResumed(**common, session_id=session)
        else:
            action = A.ConversationStarted(**common)
        await self._post(action, channel_id=telegram_thread_id(chat.id))

    # --- buttons ---------------------------------------------------------------------------

    async def _callback(self, query: CallbackQuery) -> None:
        message = query.message
        user = query.from_user
        if not isinstance(message, Message):
            await self._answer(query, NO_LONGER_PENDING)
            return
        chat = message.chat
        private = chat.type == "private"
        if not (self.settings.is_allowed(user.id) and self.settings.serves_chat(chat.id, private)):
            self.refusals += 1
            await self._answer(query, REFUSAL, alert=True)
            return
        self.platform.remember_name(user.id, user.first_name or user.username or str(user.id))
        topic = message.message_thread_id if message.is_topic_message else None
        thread_id = translate.thread_of(chat.id, chat.type, bool(chat.is_forum), topic)
        action_text = self.platform.callback_action(query.data or "")
        kind, target, detail = translate.parse_callback(action_text or "")
        state = self.runtime.snapshot(thread_id) if thread_id else None
        if thread_id is None or state is None or not kind:
            await self._answer(query, NO_LONGER_PENDING)
            return
        common: dict[str, Any] = {
            "thread_id": thread_id,
            "action_id": translate.callback_action_id(query.id),
            "at": self._clock(),
        }
        action: A.Action
        if kind == "remove_queued":
            if not any(item.id == target for item in state.queue):
                await self._answer(query, "That prompt is no longer queued.")
                return
            # Answered by the core's reply ("Removed from the queue."), as a notification.
            self.platform.remember_callback(common["action_id"], query.id)
            await self._post(A.QueuedItemRemoved(**common, item_id=target))
            return
        if not any(b.request_id == target and b.kind == kind for b in state.blockers):
            await self._answer(query, NO_LONGER_PENDING)
            return
        if kind == "permission":
            action = A.PermissionAnswered(
                **common, request_id=target, allow=detail == "allow", author_id=str(user.id)
            )
        else:
            label = _button_label(message, query.data or "")
            if label is None:
                await self._answer(query, NO_LONGER_PENDING)
                return
            action = A.QuestionAnswered(
                **common, request_id=target, answer=label, author_id=str(user.id)
            )
        await self._answer(query, None)
        await self._post(action)

    async def _answer(self, query: CallbackQuery, text: str | None, *, alert: bool = False) -> None:
        try:
            await self._retrying(lambda: self.platform.answer_callback(query.id, text, alert=alert))
        except PlatformError as error:  # too old: the user saw a spinner, nothing else
            _log.info("could not answer button press %s: %s", query.id, error)


def _button_label(message: Message, data: str) -> str | None:
    markup = message.reply_markup
    if markup is None:
        return None
    for row in markup.inline_keyboard:
        for button in row:
            if button.callback_data == data:
                return button.text
    return None


def _seconds(value: Any) -> float:
    return value.total_seconds() if hasattr(value, "total_seconds") else float(value)

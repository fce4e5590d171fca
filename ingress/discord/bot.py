"""``SpindleBot``: the discord.py client. It turns gateway events (thread messages, edits,
deletes, slash commands, button clicks, thread archive/delete) into runtime actions and
hands them to trio through a memory channel; it makes no decisions of its own.

Its handlers run on discord.py's asyncio loop (hosted by trio-asyncio, see ``host``).
What it does itself, because only Discord can do it at that moment:

- access control: only allow-listed users/roles drive agents; others get an ephemeral
  refusal for commands and clicks, and their messages are ignored; bots are ignored;
- deferring every interaction at once (Discord wants an answer within 3 s); the core's
  ``ReplyToCommand`` answers later through the followup (``DiscordPlatform.reply``);
- opening the thread for ``/<agent> start`` in a channel and for a message in a project
  channel (the action needs the new thread's id);
- attachments: small text files inlined, others saved under the conversation's workdir
  (``ingress.attachments``); a message whose attachment cannot be taken is
  answered with the reason and not sent to the agent;
- catching up, on every fresh gateway session (``on_connect``), on the messages posted to
  open threads and project channels while it had none (``ingress.discord.catchup`` says
  how it knows where it left off): they go through the same path as live messages, queued
  in order, with a line in the thread saying what was caught up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import discord
import trio
import trio_asyncio
from discord import app_commands

from threadspindle.effects.discord_platform import (
    Deferral,
    DiscordPlatform,
    discord_nonce,
    rate_limit_trace,
)
from threadspindle.ingress.attachments import (
    AttachmentLimits,
    AttachmentRefused,
    take_attachments,
)
from threadspindle.ingress.discord import translate
from threadspindle.ingress.discord.catchup import (
    CatchUpMixin,
    SeenHistory,
    discord_id,
    from_a_person,
)
from threadspindle.ingress.discord.commands import build_commands
from threadspindle.ingress.discord.items import Emit, IngressItem
from threadspindle.ingress.discord.settings import DiscordSettings
from threadspindle.ingress.transcribe import (
    TRANSCRIBING,
    Transcriber,
    TranscriptionFailed,
    transcript_notice,
)
from threadspindle.ingress.workspace_commands import new_thread_worktree
from threadspindle.runtime.core.actions import (
    Action,
    ConversationResumed,
    ConversationStarted,
    PermissionAnswered,
    QuestionAnswered,
    QueuedItemRemoved,
)
from threadspindle.runtime.core.model import Attachment, ThreadState

__all__ = ["IngressItem", "REFUSAL", "ShardedSpindleBot", "SpindleBot"]

_log = logging.getLogger(__name__)

REFUSAL = "You are not allowed to drive agents here. Ask the bot's owner to add you."
_REMEMBERED_MESSAGES = 2048
# How long close() waits for interaction acknowledgements still on their way (Discord
# wants them within 3 s of the command, so a longer wait would not help them).
_DEFERRALS_WAIT_S = 3.0


def voice_attachment(message: discord.Message) -> discord.Attachment | None:
    """The voice note of a voice message (Discord's IS_VOICE_MESSAGE flag, or an audio
    attachment with a duration and waveform), else None."""
    for attachment in message.attachments:
        if message.flags.voice or attachment.is_voice_message():
            return attachment
    return None


class SpindleBot(CatchUpMixin, discord.Client):
    def __init__(
        self,
        settings: DiscordSettings,
        *,
        events: trio.MemorySendChannel[IngressItem],
        snapshot: Callable[[str], ThreadState | None],
        history: SeenHistory | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``history``: where Spindle left off (``catchup.LoggedHistory``); without it
        nothing is caught up after a fresh session."""
        intents = discord.Intents.default()
        intents.message_content = True
        shards: dict[str, Any] = {}
        if isinstance(self, discord.AutoShardedClient):  # ShardedSpindleBot
            shards = {
                "shard_ids": list(settings.shard_ids) or None,
                "shard_count": settings.shard_count,
            }
        super().__init__(
            intents=intents,
            max_ratelimit_timeout=settings.max_ratelimit_timeout_s,
            guild_ready_timeout=settings.guild_ready_timeout_s,
            allowed_mentions=discord.AllowedMentions.none(),
            **shards,
            # the rate-limit headers of every answer, for the renderers' shared budget
            http_trace=rate_limit_trace(lambda: getattr(self, "platform", None)),
        )
        self.settings = settings
        # Voice messages: transcribed into the prompt (ingress/transcribe.py), if set up.
        self.transcriber = (
            Transcriber(settings.transcription) if settings.transcription is not None else None
        )
        self.tree = app_commands.CommandTree(self)
        self.platform = DiscordPlatform(self)
        self._events = events
        self._snapshot = snapshot
        self._clock = clock
        # Conversations started (thread -> the start's action id) that the runtime has not
        # applied yet: until it has, the thread's messages must not be taken for chatter.
        self._starting: dict[str, str] = {}
        # Messages we forwarded as prompts: id -> whether it carried the queue suffix.
        self._forwarded: OrderedDict[int, bool] = OrderedDict()
        self.refusals = 0
        self._tail: asyncio.Future[None] | None = None  # the last handler in line (_ordered)
        # Interactions acknowledged out of line (_defer) whose answer is still on its way:
        # close() lets them land, so a command sent just before a shutdown is answered.
        self._deferrals: set[Deferral] = set()
        self._history = history
        # Per thread, the newest Discord id emitted for it by this process (the log may not
        # hold it yet): where a catch-up after a lost session starts.
        self._seen: dict[str, int] = {}
        self._offline_since: float | None = None  # when this process lost its session
        self._caught_up_once = False
        self.caught_up = 0  # messages fed in by catch-ups
        self.catch_ups = 0  # catch-ups finished (one per fresh session)
        build_commands(self)

    # --- plumbing ---------------------------------------------------------------------

    async def _emit(self, item: IngressItem) -> None:
        # Straight into trio's channel (unbounded): asyncio callbacks run inside trio's
        # thread and task (trio-asyncio), where send_nowait is safe. Crossing with
        # ``trio_as_aio`` took a trio task and several scheduling rounds per item, and the
        # items go one after another (``_ordered``): under load, commands queued for
        # tens of seconds behind each other's crossings (bench chat_budget).
        self._events.send_nowait(item)
        for action in item.actions:
            seen = discord_id(action.action_id)
            if seen is not None and seen > self._seen.get(action.thread_id, 0):
                self._seen[action.thread_id] = seen

    async def _emit_in_order(self, item: IngressItem) -> None:
        async with self._ordered() as emit:
            await emit(item)

    @asynccontextmanager
    async def _ordered(self) -> AsyncIterator[Emit]:
        """Keep gateway order across handlers: discord.py runs each event handler as its
        own task, and one that awaits (a deferral, a download, a new thread) must not let a
        later event overtake it. Entered before the handler's first await, this takes a
        place in line; ``emit`` waits for the handlers ahead to have emitted (or given up).
        """
        loop = asyncio.get_running_loop()
        ahead, mine = self._tail, loop.create_future()
        self._tail = mine
        emitted = False

        async def emit(item: IngressItem) -> None:
            nonlocal emitted
            if ahead is not None:
                await ahead
            await self._emit(item)
            emitted = True

        try:
            yield emit
        finally:
            if emitted or ahead is None or ahead.done():
                mine.set_result(None)
            else:

                def follow(_: asyncio.Future[None]) -> None:
                    if not mine.done():
                        mine.set_result(None)

                ahead.add_done_callback(follow)

    async def setup_hook(self) -> None:
        if self.settings.guild_ids:
            for guild_id in self.settings.guild_ids:
                guild = discord.Object(id=guild_id)
                self.tree.copy_global_to(guild=guild)
                await self.tree.sync(guild=guild)
        else:
            await self.tree.sync()

    def has_conversation(self, thread_id: str) -> bool:
        state = self._snapshot(thread_id)
        starting = self._starting.get(thread_id)
        if starting is not None and state is not None and starting in state.recent_action_ids:
            del self._starting[thread_id]  # applied (or refused): the state says it all now
            starting = None
        if starting is not None:
            return True
        return state is not None and state.conversation is not None

    def now(self) -> float:
        """The ingress clock (what a command's ``at`` is stamped with)."""
        return self._clock()

    def workdir_of(self, thread_id: str) -> str | None:
        state = self._snapshot(thread_id)
        if state is not None and state.conversation is not None:
            return state.conversation.workdir
        return None

    def allowed(self, user: discord.abc.User) -> bool:
        roles = tuple(role.id for role in getattr(user, "roles", ()))
        return self.settings.is_allowed(user.id, roles)

    async def refuse(self, interaction: discord.Interaction) -> None:
        self.refusals += 1
        await interaction.response.send_message(REFUSAL, ephemeral=True)

    async def _author_allowed(self, message: discord.Message) -> bool:
        """``allowed`` for a message's author. A live message names a member (with roles);
        one read from history names a user, so its member is looked up for its roles."""
        author: discord.abc.User = message.author
        if (
            not isinstance(author, discord.Member)
            and message.guild is not None
            and self.settings.allowed_role_ids
            and not self.settings.is_allowed(author.id, ())
        ):
            try:
                author = message.guild.get_member(author.id) or await message.guild.fetch_member(
                    author.id
                )
            except discord.HTTPException as error:  # left the guild: no roles
                _log.info("could not look up member %s: %s", author.id, error)
        if self.allowed(author):
            return True
        self.refusals += 1
        _log.info("ignoring a message from %s: not allow-listed", author.id)
        return False

    # --- messages ---------------------------------------------------------------------

    async def on_message(self, message: discord.Message) -> None:
        if not from_a_person(message):
            return
        channel = message.channel
        async with self._ordered() as emit:
            # A thread the client has not cached (archived while it was offline) arrives
            # as a partial channel: what matters is whether a conversation lives there.
            if isinstance(channel, discord.Thread) or self.has_conversation(str(channel.id)):
                await self._thread_message(message, str(channel.id), emit)
            elif (project := self.settings.project_channel(channel.id)) is not None:
                await self._project_message(message, project.agent, project.workdir, emit)

    async def _thread_message(self, message: discord.Message, thread_id: str, emit: Emit) -> None:
        if not self.has_conversation(thread_id) or not await self._author_allowed(message):
            return
        if message.stickers and not message.content.strip() and not message.attachments:
            # A sticker alone is a reaction, not a prompt: no answer, nothing interrupted
            # (an empty message of another kind is refused by the core, with a reply).
            return
        command, shell = await self._shell_of(message, thread_id)
        if command:  # "!<command>": a shell command (or refused), not a prompt
            if shell is not None:
                await emit(IngressItem((shell,)))
            return
        content = await self._prompt_content(message, self.workdir_of(thread_id))
        if content is None:
            return
        text, attachments = content
        parent = getattr(message.channel, "parent_id", None)
        action = translate.prompt_action(
            thread_id=thread_id,
            message_id=message.id,
            author_id=message.author.id,
            author_name=message.author.display_name,
            text=text,
            at=self._clock(),
            attachments=attachments,
            suffix=self.settings.queue_suffix,
            steer_suffix=self.settings.steer_suffix,
            mode=self.settings.plain_message_mode(parent),
        )
        self._remember(message.id, queued=translate.is_queued(action))
        await emit(IngressItem((action,), channel_id=str(parent) if parent else None))

    async def _project_message(
        self,
        message: discord.Message,
        agent: str,
        workdir: str,
        emit: Emit,
        *,
        notice: str | None = None,
    ) -> bool:
        """Open a thread for the message and start its conversation there, ``notice``
        first in the thread. False when it did not (not allowed, no thread, or already:
        a message can come both live and from a catch-up, or twice from the gateway, and
        each would open a thread of its own; so it is claimed before the first await)."""
        if message.id in self._forwarded:
            return False
        content = message.content
        voice = voice_attachment(message)
        suffixed = translate.split_queue_suffix(content, self.settings.queue_suffix)[1]
        self._remember(message.id, queued=suffixed)
        if not await self._author_allowed(message):
            self._forwarded.pop(message.id, None)
            return False
        if voice is not None:
            # A voice message opens its thread with its transcript, never with the file.
            transcript = await self._transcribe(message, voice)
            if transcript is None:
                self._forwarded.pop(message.id, None)
                return False
            content = transcript
        name = (content.strip().splitlines() or [agent])[0][:90] or agent
        try:
            thread = await message.create_thread(name=name)
            if notice is not None:
                await thread.send(notice, allowed_mentions=discord.AllowedMentions.none())
        except discord.HTTPException as error:
            _log.warning("could not open a thread for message %s: %s", message.id, error)
            self._forwarded.pop(message.id, None)
            return False
        thread_id = str(thread.id)
        self._starting[thread_id] = f"start-{message.id}"
        start = ConversationStarted(
            thread_id=thread_id,
            action_id=f"start-{message.id}",
            at=self._clock(),
            agent=agent,
            requested_workdir=workdir,
            resolved_workdir=translate.resolve_workdir(workdir, self.settings.default_workdir),
        )
        try:
            attachments = (
                ()
                if voice is not None
                else await self._attachments(message, start.resolved_workdir)
            )
        except AttachmentRefused as refused:
            # The thread is open and its conversation starts; only the prompt is refused.
            await emit(IngressItem((start,), channel_id=str(message.channel.id)))
            await self._answer_message(message, f"⚠ Not sent to the agent: {refused}")
            return False  # no prompt was fed in (a catch-up does not count it)
        prompt = translate.prompt_action(
            thread_id=thread_id,
            message_id=message.id,
            author_id=message.author.id,
            author_name=message.author.display_name,
            text=content,
            at=self._clock(),
            attachments=attachments,
            suffix=self.settings.queue_suffix,
            steer_suffix=self.settings.steer_suffix,
            mode=self.settings.plain_message_mode(message.channel.id),
        )
        self._remember(message.id, queued=translate.is_queued(prompt))
        project = self.settings.project_channel(message.channel.id)
        if project is not None and project.worktree:
            # Its own worktree first: the prompt waits in the queue until it is made.
            worktree = new_thread_worktree(thread_id, self._clock())
            await emit(IngressItem((start, worktree, prompt), channel_id=str(message.channel.id)))
            return True
        await emit(IngressItem((start, prompt), channel_id=str(message.channel.id)))
        return True

    async def _attachments(
        self, message: discord.Message, workdir: str | None
    ) -> tuple[Attachment, ...]:
        """Small text files inlined; others saved under ``<workdir>/.spindle/attachments``
        (or only linked when there is no workdir yet); ``AttachmentRefused`` says why one
        cannot be taken."""
        limits = AttachmentLimits(
            inline_text_bytes=self.settings.inline_text_limit,
            max_bytes=self.settings.attachment_max_bytes,
        )
        return await take_attachments(
            message.attachments, message_id=message.id, workdir=workdir, limits=limits
        )

    async def _prompt_content(
        self, message: discord.Message, workdir: str | None
    ) -> tuple[str, tuple[Attachment, ...]] | None:
        """What a message in a conversation's thread prompts: its text and attachments, or
        a voice message's transcript (the audio itself never reaches the agent); None when
        it is not sent to the agent (the user was told why)."""
        voice = voice_attachment(message)
        if voice is not None:
            transcript = await self._transcribe(message, voice)
            return None if transcript is None else (transcript, ())
        try:
            return message.content, await self._attachments(message, workdir)
        except AttachmentRefused as refused:
            await self._answer_message(message, f"⚠ Not sent to the agent: {refused}")
            return None

    async def _transcribe(self, message: discord.Message, voice: discord.Attachment) -> str | None:
        """The thread shows "🎤 Transcribing…", then the transcript (or why there is
        none); the transcript, or None when the message is not sent to the agent."""
        transcriber = self.transcriber
        if transcriber is None:
            await self._answer_message(
                message,
                "⚠ Not sent to the agent: voice messages need a transcription endpoint "
                "(`[transcription]` in Spindle's config).",
            )
            return None
        status = await message.reply(
            TRANSCRIBING,
            mention_author=False,
            nonce=discord_nonce(f"voice/{message.id}"),
            allowed_mentions=discord.AllowedMentions.none(),
        )
        try:
            if voice.size > transcriber.config.max_bytes:
                raise TranscriptionFailed(f"the voice message is too long ({voice.size} bytes)")
            audio = await voice.read()
            # httpx runs on trio: this handler is asyncio code inside trio-asyncio.
            text: str = await trio_asyncio.trio_as_aio(transcriber.transcribe)(
                audio, voice.filename, voice.content_type
            )
        except (TranscriptionFailed, discord.HTTPException) as error:
            _log.warning("could not transcribe voice message %s: %s", message.id, error)
            await status.edit(content=f"⚠ Could not transcribe the voice message: {error}")
            return None
        await status.edit(content=transcript_notice(text))
        return text

    async def _answer_message(self, message: discord.Message, text: str) -> None:
        """Answer a message ingress could not take (a gateway redelivery of it gets the
        same nonce, so the answer is not posted twice)."""
        try:
            await message.reply(
                text,
                mention_author=False,
                nonce=discord_nonce(f"refused/{message.id}"),
                allowed_mentions=discord.AllowedMentions.none(),
            )
        except discord.HTTPException as error:
            _log.warning("could not answer message %s: %s", message.id, error)

    def _remember(self, message_id: int, *, queued: bool) -> None:
        self._forwarded[message_id] = queued
        while len(self._forwarded) > _REMEMBERED_MESSAGES:
            self._forwarded.popitem(last=False)

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        was_queued = self._forwarded.get(payload.message_id)
        content = payload.data.get("content")
        if was_queued is None or content is None:
            return  # not a prompt of ours, or an embed-only update
        action = translate.edit_action(
            thread_id=str(payload.channel_id),
            message_id=payload.message_id,
            text=content,
            was_queued=was_queued,
            at=self._clock(),
            edit_stamp=str(payload.data.get("edited_timestamp") or ""),
            suffix=self.settings.queue_suffix,
        )
        self._remember(payload.message_id, queued=translate.split_queue_suffix(content)[1])
        await self._emit_in_order(IngressItem((action,)))

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        if self._forwarded.pop(payload.message_id, None) is None:
            return
        action = translate.delete_action(
            thread_id=str(payload.channel_id), message_id=payload.message_id, at=self._clock()
        )
        await self._emit_in_order(IngressItem((action,)))

    # --- threads ----------------------------------------------------------------------

    async def on_raw_thread_update(self, payload: discord.RawThreadUpdateEvent) -> None:
        if payload.data.get("thread_metadata", {}).get("archived"):
            await self._dispose(str(payload.thread_id))

    async def on_raw_thread_delete(self, payload: discord.RawThreadDeleteEvent) -> None:
        await self._dispose(str(payload.thread_id))

    async def _dispose(self, thread_id: str) -> None:
        if self.has_conversation(thread_id):
            self._starting.pop(thread_id, None)
            await self._emit_in_order(IngressItem(dispose_thread=thread_id))

    # --- buttons and menus ------------------------------------------------------------

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        if interaction.type is not discord.InteractionType.component:
            return  # slash commands go through the command tree
        data: dict[str, Any] = dict(interaction.data or {})
        kind, args = translate.parse_custom_id(str(data.get("custom_id", "")))
        if kind not in ("remove_queued", "permission", "question"):
            return
        if not self.allowed(interaction.user):
            await self.refuse(interaction)
            return
        async with self._ordered() as emit:
            deferral = self._defer(interaction)
            action = self._component_action(interaction, kind, args, data, deferral)
            await emit(IngressItem((action,)))
        await deferral  # out of line: the events behind this one need not wait for it

    def _component_action(
        self,
        interaction: discord.Interaction,
        kind: str,
        args: tuple[str, ...],
        data: dict[str, Any],
        deferral: Deferral | None = None,
    ) -> Action:
        action_id = translate.component_action_id(interaction.id)
        self.platform.remember_interaction(action_id, interaction, deferral)
        common: dict[str, Any] = {
            "thread_id": str(interaction.channel_id),
            "action_id": action_id,
            "at": self._clock(),
        }
        action: Action
        if kind == "remove_queued":
            action = QueuedItemRemoved(**common, item_id=args[0])
        elif kind == "permission":
            action = PermissionAnswered(
                **common,
                request_id=args[0],
                allow=args[1] == "allow",
                author_id=str(interaction.user.id),
            )
        else:
            values = [str(v) for v in data.get("values", [])]
            action = QuestionAnswered(
                **common,
                request_id=args[0],
                answer=", ".join(values),
                author_id=str(interaction.user.id),
            )
        return action

    # --- slash commands ---------------------------------------------------------------

    async def command(
        self, interaction: discord.Interaction, build: Callable[[str, dict[str, Any]], Action]
    ) -> None:
        """Refuse, or defer and post the action ``build(thread_id, common fields)``."""
        if not self.allowed(interaction.user):
            await self.refuse(interaction)
            return
        async with self._ordered() as emit:
            deferral = self._defer(interaction, thinking=True)
            await self._post_command(interaction, build, emit, deferral=deferral)
        await deferral  # out of line: the events behind this one need not wait for it

    def _defer(self, interaction: discord.Interaction, *, thinking: bool = False) -> Deferral:
        """Acknowledge the interaction (Discord wants it within 3 s) beside posting its
        action, not before: the action goes to the runtime at once, and its reply, which
        must follow the deferral, waits for it (``DiscordPlatform.reply``). Awaiting the
        deferral first held every later event in line (``_ordered``) for its round trip."""
        deferral = asyncio.ensure_future(interaction.response.defer(thinking=thinking))
        self._deferrals.add(deferral)
        deferral.add_done_callback(self._deferrals.discard)
        return deferral

    async def close(self) -> None:
        """Let the acknowledgements on their way land first (at most ``_DEFERRALS_WAIT_S``):
        closing the HTTP session under them failed them, and the user saw "The application
        did not respond" for a command Spindle had already taken."""
        if self._deferrals:
            await asyncio.wait(set(self._deferrals), timeout=_DEFERRALS_WAIT_S)
        await super().close()

    async def _post_command(
        self,
        interaction: discord.Interaction,
        build: Callable[[str, dict[str, Any]], Action],
        emit: Emit,
        *,
        thread_id: str | None = None,
        deferral: Deferral | None = None,
    ) -> None:
        action_id = translate.interaction_action_id(interaction.id)
        self.platform.remember_interaction(action_id, interaction, deferral)
        target = thread_id or str(interaction.channel_id)
        common = {"thread_id": target, "action_id": action_id, "at": self._clock()}
        await emit(IngressItem((build(target, common),)))

    async def start_conversation(
        self,
        interaction: discord.Interaction,
        agent: str,
        workdir: str | None,
        session_id: str | None = None,
    ) -> None:
        if not self.allowed(interaction.user):
            await self.refuse(interaction)
            return
        async with self._ordered() as emit:
            await interaction.response.defer(thinking=True)
            await self._start_deferred(interaction, agent, workdir, session_id, emit)

    async def _start_deferred(
        self,
        interaction: discord.Interaction,
        agent: str,
        workdir: str | None,
        session_id: str | None,
        emit: Emit,
    ) -> None:
        requested = workdir or self.settings.default_workdir
        channel = interaction.channel
        thread_id = str(interaction.channel_id)
        # A relative path is taken from where the user is: this thread's workdir, else the
        # default one (as the autocomplete offers it), never from Spindle's own directory.
        base = self.workdir_of(thread_id) or self.settings.default_workdir
        if isinstance(channel, discord.TextChannel):
            # Started in a channel: the conversation gets its own thread.
            try:
                thread = await channel.create_thread(
                    name=f"{agent}: {requested}"[:90], type=discord.ChannelType.public_thread
                )
            except discord.HTTPException as error:
                # Ephemeral, so the public "thinking..." message of the deferral goes first.
                await interaction.delete_original_response()
                await interaction.followup.send(
                    f"Could not open a thread here: {error.text or error.status}. "
                    "Check the bot's Create Public Threads permission.",
                    ephemeral=True,
                )
                return
            thread_id = str(thread.id)
        self._starting[thread_id] = translate.interaction_action_id(interaction.id)
        resolved = translate.resolve_workdir(requested, base)

        def build(target: str, common: dict[str, Any]) -> Action:
            if session_id is not None:
                return ConversationResumed(
                    **common,
                    agent=agent,
                    session_id=session_id,
                    requested_workdir=requested,
                    resolved_workdir=resolved,
                )
            return ConversationStarted(
                **common, agent=agent, requested_workdir=requested, resolved_workdir=resolved
            )

        await self._post_command(interaction, build, emit, thread_id=thread_id)


class ShardedSpindleBot(SpindleBot, discord.AutoShardedClient):
    """``SpindleBot`` holding ``settings.shard_ids`` of ``settings.shard_count`` shards (a
    gateway node of ``spindle gateway``: docs/scale-out.md). Discord sends it only the
    events of its shards' guilds; everything else is ``SpindleBot``'s."""

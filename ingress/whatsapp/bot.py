"""``WhatsAppIngress``: received WhatsApp messages -> runtime actions, each durable before the
webhook is answered.

The webhook (``host``) hands over a delivery only once its signature holds. Each message is
handled in order and ``handle_delivery`` returns once every action it posted is in the
durable log (``Receipt.durable``); only then does the webhook answer 200. Meta retries a
delivery it got no 200 for, so a crash before that loses nothing, and a message handled
twice is harmless twice over: it is dropped here by its message id (``seen``: the ids
handled, kept on disk for as long as a message is taken, so a captured signed delivery
replayed later, even after a restart, is dropped too) and by the core while the thread's
recent actions hold it (its action id is ``wa-<wamid>``). A message sent more than
``max_message_age_s`` ago (its ``timestamp``) is dropped as well.

What it does itself, because only WhatsApp can:

- access control: only allow-listed wa_ids (in groups: allow-listed groups too); a refused
  sender is told once in a while in their own chat, never in a group;
- read receipts for every accepted message (in the background: a slow Graph API must not
  hold up the webhook), and the chat's last message for the typing indicator;
- button and list replies (and a number answering a numbered prompt) -> answers, "Remove
  from queue" -> removal; a prompt no longer pending is said so;
- commands in plain text (``translate.parse_command``) and the trailing `` queue``;
- images, videos and documents: downloaded into memory under ``attachment_max_bytes`` and
  saved into the workdir for the agent (``ingress.attachments.store_attachments``), the
  caption the prompt; other media (stickers, locations) are answered with a hint to type;
- voice and audio messages: downloaded into memory (``download_media``), transcribed
  (``ingress.transcribe``), shown "🎤 Transcribing…" then "🎤 <transcript>" (new messages:
  no edits), and the transcript is the prompt. This happens inside the delivery, so the
  webhook still answers only once the prompt is durable: the answer waits for the
  download and the transcription (bounded by ``[transcription] timeout_s``), and a
  redelivery meanwhile waits its turn and is dropped by id.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from threadspindle.effects.platform import PlatformError
from threadspindle.effects.whatsapp_platform import WhatsAppPlatform, whatsapp_thread_id
from threadspindle.ingress.agent_commands import conversations_text, start_or_resume
from threadspindle.ingress.attachments import (
    FILES_WITH_A_COMMAND,
    AttachmentLimits,
    AttachmentRefused,
    store_attachments,
)
from threadspindle.ingress.discord.translate import resolve_workdir
from threadspindle.ingress.input_checks import InputRefused
from threadspindle.ingress.refusal_notes import RefusalNotes
from threadspindle.ingress.runtime_port import RuntimePort
from threadspindle.ingress.telegram.translate import parse_callback
from threadspindle.ingress.thread_commands import command_list, thread_action, typed_prompt
from threadspindle.ingress.transcribe import (
    TRANSCRIBING,
    Transcriber,
    TranscriptionFailed,
    transcript_notice,
)
from threadspindle.ingress.whatsapp import translate
from threadspindle.ingress.whatsapp.seen import SeenMessages
from threadspindle.ingress.whatsapp.settings import WhatsAppSettings
from threadspindle.ingress.workspace_commands import is_shell_text
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.model import Attachment

__all__ = ["NO_TRANSCRIPTION", "REFUSAL", "RuntimePort", "WhatsAppIngress", "help_text"]

_log = logging.getLogger(__name__)

T = TypeVar("T")

_CHOICE_NUMBER = re.compile(r"[0-9]{1,4}")  # a number answering a numbered prompt
# The ids handled are kept this much longer than a message is taken: the sender's clock
# (the message's timestamp) and this machine's may differ.
SEEN_MARGIN_S = 3600.0

REFUSAL = "You are not allowed to drive agents here. Ask the owner of this number to add you."
NO_LONGER_PENDING = "That prompt is no longer pending."
NO_MEDIA = "Media messages are not understood here: please type your message."
NO_TRANSCRIPTION = (
    "⚠ Not sent to the agent: voice messages need a transcription endpoint "
    "([transcription] in Spindle's config)."
)
# The file name tells an OpenAI-compatible endpoint the audio's format.
_AUDIO_EXTENSIONS = {
    "audio/ogg": "ogg",
    "audio/opus": "ogg",
    "audio/mpeg": "mp3",
    "audio/mp4": "m4a",
    "audio/aac": "aac",
    "audio/amr": "amr",
    "audio/wav": "wav",
    "audio/webm": "webm",
}
NO_CONVERSATION = "No conversation here yet: start one with /claude start [workdir] (or /help)."


def help_text(agents: tuple[str, ...]) -> str:
    names = " | ".join(f"/{agent}" for agent in agents)
    return (
        'Plain messages are prompts for this chat\'s agent (a message ending in " queue" '
        'waits its turn instead of interrupting, one ending in " steer" is added to the '
        "running turn; !<command> runs a shell command).\n"
        f"{names} start [workdir] | resume <id> [workdir] | conversations\n"
        + command_list(has_threads=False)
        + " · /help"
    )


class WhatsAppIngress:
    def __init__(
        self,
        settings: WhatsAppSettings,
        platform: WhatsAppPlatform,
        runtime: RuntimePort,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.platform = platform
        self.runtime = runtime
        self._clock = clock
        # Voice messages: transcribed into the prompt (ingress/transcribe.py), if set up.
        self.transcriber = (
            Transcriber(settings.transcription) if settings.transcription is not None else None
        )
        # The wamids handled: in memory (bounded) and on disk for as long as a delivery
        # of them is still taken (``seen``: a replayed delivery must not run again).
        self.seen = SeenMessages(
            settings.seen_path,
            keep_s=settings.max_message_age_s + SEEN_MARGIN_S,
            remembered=settings.deliveries_remembered,
        )
        self._told = RefusalNotes(settings.refusal_interval_s)  # who was told they are refused
        self._reads_in, self._reads_out = trio.open_memory_channel[str](1024)
        self.handled = 0
        self.duplicates = 0  # redelivered messages dropped by id
        self.stale = 0  # messages dropped as sent too long ago (a replay, or far too late)
        self.refusals = 0
        self.skipped = 0  # parts of deliveries not understood

    # --- deliveries -------------------------------------------------------------------

    async def handle_delivery(self, delivery: translate.Delivery) -> None:
        """Handle every message of a (signed) delivery; returns once each is durable."""
        self.skipped += delivery.skipped
        for inbound in delivery.messages:
            if inbound.wamid in self.seen:
                self.duplicates += 1
                continue
            if self._too_old(inbound):
                self.stale += 1
                _log.warning(
                    "dropped WhatsApp message %s: sent %d s ago (a replay, or far too late)",
                    inbound.wamid,
                    int(self._clock()) - inbound.timestamp,
                )
                continue
            if inbound.phone_number_id and inbound.phone_number_id != (
                self.settings.phone_number_id
            ):
                self.skipped += 1  # sent to another number of the same account
                continue
            await self.handle(inbound)
            self.seen.add(inbound.wamid, self._clock())

    def _too_old(self, inbound: translate.Inbound) -> bool:
        """Sent longer ago than ``max_message_age_s``. Meta always sends a timestamp; a
        message without one (0) is not judged."""
        age = self._clock() - inbound.timestamp
        return inbound.timestamp > 0 and age > self.settings.max_message_age_s

    async def send_read_receipts(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Mark accepted messages read, in the background, until cancelled."""
        task_status.started()
        async for wamid in self._reads_out:
            try:
                await self._retrying(lambda w=wamid: self.platform.mark_read(w))  # type: ignore[misc]
            except PlatformError as error:
                _log.info("could not mark %s read: %s", wamid, error)

    async def handle(self, inbound: translate.Inbound) -> None:
        self.handled += 1
        if not await self._allowed(inbound):
            return
        thread_id = inbound.thread_id
        self.platform.remember_inbound(thread_id, inbound.wamid)
        try:
            self._reads_in.send_nowait(inbound.wamid)
        except trio.WouldBlock:
            pass  # a receipt is cosmetic: dropped rather than holding the webhook
        if inbound.kind == "audio":
            await self._voice(inbound)
            return
        if inbound.kind == "file":
            await self._file(inbound)
            return
        if inbound.kind in ("media", "other"):
            await self._say(thread_id, NO_MEDIA, reply_to=inbound.wamid)
            return
        if inbound.kind == "choice":
            await self._choice(inbound, inbound.choice_id or "", inbound.text)
            return
        text = inbound.text
        # ASCII digits only, and few: "²".isdigit() is True and int("²") raises, and so
        # does int() of over 4,300 digits (a delivery failed by it was retried for ever).
        if _CHOICE_NUMBER.fullmatch(number := text.strip()) and (
            numbered := self.platform.numbered_choice(thread_id, int(number))
        ):
            await self._choice(inbound, *numbered)
            return
        command = translate.parse_command(text)
        if command is not None:
            try:
                await self._command(inbound, command)
            except InputRefused as refused:
                await self._say(thread_id, str(refused), reply_to=inbound.wamid)
            return
        if not text.strip():
            return
        if self._has_conversation(thread_id):
            await self._prompt(inbound, text)
        else:
            await self._say(thread_id, NO_CONVERSATION, reply_to=inbound.wamid)

    async def _prompt(
        self, inbound: translate.Inbound, text: str, attachments: tuple[Attachment, ...] = ()
    ) -> None:
        """A typed message, a voice message's transcript or a file with its caption -> a
        prompt (interrupting, or queued with the `` queue`` suffix, or steered with
        `` steer``)."""
        thread_id = inbound.thread_id
        try:
            action = self._typed(inbound, text, attachments)
        except InputRefused as refused:  # a shell command too long
            await self._say(thread_id, str(refused), reply_to=inbound.wamid)
            return
        await self._post(action)

    def _typed(
        self, inbound: translate.Inbound, text: str, attachments: tuple[Attachment, ...] = ()
    ) -> A.Action:
        return typed_prompt(
            text,
            {
                "thread_id": inbound.thread_id,
                "action_id": translate.action_id(inbound.wamid),
                "at": self._clock(),
            },
            author_id=inbound.sender,
            author_name=inbound.name,
            source_message_id=inbound.wamid,
            queue_suffix=self.settings.queue_suffix,
            attachments=attachments,
        )

    # --- images, videos and documents ----------------------------------------------------

    async def _file(self, inbound: translate.Inbound) -> None:
        """An image, a video or a document: saved into the conversation's workdir (a small
        text file inlined) and named to the agent, its caption the prompt. Downloaded into
        memory under ``attachment_max_bytes`` (the client's own cap), then written by a
        worker thread. A file that cannot be taken is told, and nothing goes to the agent."""
        thread_id, wamid = inbound.thread_id, inbound.wamid
        if not self._has_conversation(thread_id):
            await self._say(thread_id, NO_CONVERSATION, reply_to=wamid)
            return
        if inbound.text.startswith("/") or is_shell_text(inbound.text):
            # A command as a caption: the file would go nowhere (rather than dropped quietly).
            await self._say(thread_id, FILES_WITH_A_COMMAND, reply_to=wamid)
            return
        media_id, limit = inbound.media_id, self.settings.attachment_max_bytes
        kind = (inbound.mime_type or "").split("/", 1)[0] or "file"
        name = inbound.filename or f"{kind}-{media_id}{_extension(inbound.mime_type)}"
        try:
            assert media_id is not None  # translate names one for every file
            data, mime = await self._retrying(
                lambda: self.platform.download_media(media_id, max_bytes=limit)
            )
            attachments = await trio.to_thread.run_sync(
                lambda: store_attachments(
                    [(name, data, mime or inbound.mime_type)],
                    # wamids hold "=" and run long: a digest names the files instead
                    message_id="wa" + hashlib.sha256(wamid.encode()).hexdigest()[:12],
                    workdir=self._workdir(thread_id),
                    limits=AttachmentLimits(max_bytes=limit),
                )
            )
        except (AttachmentRefused, PlatformError) as error:
            _log.warning("could not take the file of message %s: %s", wamid, error)
            await self._say(thread_id, f"⚠ Not sent to the agent: {error}", reply_to=wamid)
            return
        await self._prompt(inbound, inbound.text, attachments)

    # --- voice messages ------------------------------------------------------------------

    async def _voice(self, inbound: translate.Inbound) -> None:
        """An audio message: its transcript is the prompt; the audio never reaches the agent
        and is never written to disk."""
        thread_id = inbound.thread_id
        if not self._has_conversation(thread_id):
            await self._say(thread_id, NO_CONVERSATION, reply_to=inbound.wamid)
            return
        transcript = await self._transcribe(inbound)
        if transcript is not None:
            await self._prompt(inbound, transcript)

    async def _transcribe(self, inbound: translate.Inbound) -> str | None:
        """The chat shows "🎤 Transcribing…", then (a new message: WhatsApp has no edits)
        the transcript or why there is none; the transcript, or None when nothing goes to
        the agent. A failure is told and not raised: Meta's redelivery would only fail again.
        """
        thread_id, wamid = inbound.thread_id, inbound.wamid
        transcriber = self.transcriber
        if transcriber is None:
            await self._say(thread_id, NO_TRANSCRIPTION, reply_to=wamid)
            return None
        await self._say(thread_id, TRANSCRIBING, reply_to=wamid)
        text: str | None = None
        try:
            if inbound.media_id is None:
                raise TranscriptionFailed("WhatsApp named no audio in the message")
            media_id, limit = inbound.media_id, transcriber.config.max_bytes
            audio, mime = await self._retrying(
                lambda: self.platform.download_media(media_id, max_bytes=limit)
            )
            mime = mime or inbound.mime_type
            text = await transcriber.transcribe(audio, _audio_filename(mime), mime)
            shown = transcript_notice(text)
        except (TranscriptionFailed, PlatformError) as error:
            _log.warning("could not transcribe voice message %s: %s", wamid, error)
            text, shown = None, f"⚠ Could not transcribe the voice message: {error}"
        await self._say(thread_id, shown, reply_to=wamid)
        return text

    # --- plumbing ------------------------------------------------------------------------

    async def _post(self, action: A.Action) -> None:
        receipt = await self.runtime.post(action, channel_id=action.thread_id)
        await receipt.durable()

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """A platform call made by ingress itself, through throttling and short outages."""
        for attempt in range(6):
            try:
                return await call()
            except PlatformError as error:
                if not error.retryable or attempt == 5:
                    raise
                await trio.sleep(error.retry_after or min(0.5 * 2**attempt, 8.0))
        raise AssertionError("unreachable")

    async def _say(self, thread_id: str, text: str, *, reply_to: str | None = None) -> None:
        try:
            await self._retrying(lambda: self.platform.say(thread_id, text, reply_to=reply_to))
        except PlatformError as error:
            _log.warning("could not answer in %s: %s", thread_id, error)

    def _has_conversation(self, thread_id: str) -> bool:
        state = self.runtime.snapshot(thread_id)
        return state is not None and state.conversation is not None

    def _workdir(self, thread_id: str) -> str:
        state = self.runtime.snapshot(thread_id)
        if state is not None and state.conversation is not None:
            return state.conversation.workdir
        return self.settings.default_workdir

    async def _allowed(self, inbound: translate.Inbound) -> bool:
        sender = inbound.sender
        group_ok = inbound.group_id is None or self.settings.serves_group(inbound.group_id)
        if self.settings.is_allowed(sender) and group_ok:
            return True
        self.refusals += 1
        _log.info("ignoring wa_id %s in %s: not allow-listed", sender, inbound.thread_id)
        now = self._clock()
        if self._told.due(sender, now):
            await self._say(whatsapp_thread_id(sender), REFUSAL)  # their own chat, not a group
        return False

    # --- buttons, lists and numbers ----------------------------------------------------------

    async def _choice(self, inbound: translate.Inbound, choice_id: str, title: str) -> None:
        thread_id = inbound.thread_id
        kind, target, detail = parse_callback(choice_id)
        state = self.runtime.snapshot(thread_id)
        common: dict[str, Any] = {
            "thread_id": thread_id,
            "action_id": translate.action_id(inbound.wamid),
            "at": self._clock(),
        }
        if state is None or not kind:
            await self._say(thread_id, NO_LONGER_PENDING, reply_to=inbound.wamid)
            return
        if kind == "remove_queued":
            if not any(item.id == target for item in state.queue):
                await self._say(
                    thread_id, "That prompt is no longer queued.", reply_to=inbound.wamid
                )
                return
            await self._post(A.QueuedItemRemoved(**common, item_id=target))
            return
        if not any(b.request_id == target and b.kind == kind for b in state.blockers):
            await self._say(thread_id, NO_LONGER_PENDING, reply_to=inbound.wamid)
            return
        self.platform.forget_numbered(thread_id)
        action: A.Action
        if kind == "permission":
            action = A.PermissionAnswered(
                **common, request_id=target, allow=detail == "allow", author_id=inbound.sender
            )
        else:
            label = self.platform.choice_label(choice_id) or title
            action = A.QuestionAnswered(
                **common, request_id=target, answer=label, author_id=inbound.sender
            )
        await self._post(action)

    # --- commands ---------------------------------------------------------------------------

    async def _command(self, inbound: translate.Inbound, command: translate.ParsedCommand) -> None:
        thread_id = inbound.thread_id
        name, args = command.name, command.args
        words = args.split()
        agent, _, sub = name.partition("_")  # /claude_start as well as /claude start
        if agent in self.settings.agents:
            if not sub and words and words[0].lower() in ("start", "resume", "conversations"):
                sub, args = words[0].lower(), args[len(words[0]) :].strip()
            await self._agent_command(inbound, agent, sub or "start", args)
            return
        if name in ("help", "start"):
            await self._say(thread_id, help_text(self.settings.agents), reply_to=inbound.wamid)
            return
        if not self._has_conversation(thread_id):
            await self._say(thread_id, NO_CONVERSATION, reply_to=inbound.wamid)
            return
        common: dict[str, Any] = {
            "thread_id": thread_id,
            "action_id": translate.action_id(inbound.wamid),
            "at": self._clock(),
        }
        action = thread_action(
            name,
            args,
            common,
            author_id=inbound.sender,
            author_name=inbound.name,
            source_message_id=inbound.wamid,
            workdir=self._workdir(thread_id),
            has_threads=False,  # a chat: /fork and /btw are refused at once
        )
        await self._post(action)

    async def _agent_command(
        self, inbound: translate.Inbound, agent: str, sub: str, args: str
    ) -> None:
        thread_id = inbound.thread_id
        if sub == "conversations":
            text = conversations_text(agent, self._workdir(thread_id), f"/{agent} resume <id>")
            await self._say(thread_id, text, reply_to=inbound.wamid)
            return
        session, requested = start_or_resume(
            agent, sub, args, self.settings.default_workdir, f"/{agent}"
        )
        common: dict[str, Any] = {
            "thread_id": thread_id,
            "action_id": translate.action_id(inbound.wamid),
            "at": self._clock(),
            "agent": agent,
            "requested_workdir": requested,
            "resolved_workdir": resolve_workdir(requested, self._workdir(thread_id)),
        }
        action: A.Action
        if session is not None:
            action = A.ConversationResumed(**common, session_id=session)
        else:
            action = A.ConversationStarted(**common)
        await self._post(action)


def _audio_filename(mime: str | None) -> str:
    kind = (mime or "").split(";")[0].strip().lower()
    return f"voice.{_AUDIO_EXTENSIONS.get(kind, 'ogg')}"


def _extension(mime: str | None) -> str:
    """A file name's extension for a medium WhatsApp sent without a name (an image)."""
    base = (mime or "").split(";", 1)[0].strip()
    return {
        "image/jpeg": ".jpg",
        "image/png": ".png",
        "image/webp": ".webp",
        "video/mp4": ".mp4",
        "video/3gpp": ".3gp",
        "application/pdf": ".pdf",
    }.get(base, "")

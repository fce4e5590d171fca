"""``SlackIngress``: Slack envelopes (Socket Mode) -> runtime actions, in the order they
arrived, each acknowledged to Slack only once its action is durable.

Slack delivers an envelope until it is acknowledged, and slack-sdk's Socket Mode client
runs every envelope in a task of its own, so bolt's listeners see them in no fixed order.
So the host taps the socket (``on_envelope``, which runs first, in arrival order) and hands
each envelope to one trio task (``run``) that handles them one at a time; bolt's listener
for that envelope waits (``settled``) until it is handled and durable, and only then lets
bolt acknowledge it (``process_before_response``). A process that dies before the ack
gets the envelope again from Slack; its action ids come from Slack's ids (``translate``),
so the core drops what it already has. What was said while Spindle was down (replies in
known threads, top-level messages of project channels) is read back with
``conversations.replies`` and ``conversations.history`` (``catch_up``) and goes the same way.

It makes no decisions of its own; what it does itself, because only Slack can do it:

- access control: allow-listed users of allowed workspaces, in allow-listed channels,
  project channels and direct messages; a refused user is told once in a while by a
  message only they see (ephemeral), nobody else sees anything; other bots are ignored.
  Only what is addressed to Spindle is refused (a thread with a conversation, a project
  channel, a mention of the app): people talking among themselves are left alone;
- a top-level message in a project channel starts a conversation in its own thread;
  ``/spindle <agent> start`` in a channel posts an anchor message whose thread is the
  conversation's (once, even when the envelope comes again);
- commands: ``/spindle …`` in a channel, ``@Spindle …`` in a thread (Slack runs no
  slash command there), and the trailing `` queue``; an edit or delete of a queued
  message updates or withdraws it;
- button presses and menu choices: a prompt that is no longer pending is said so (to the
  presser alone) and nothing is posted.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import trio

from threadspindle.effects.platform import PlatformError
from threadspindle.effects.slack_platform import (
    SlackPlatform,
    parse_thread_id,
    slack_thread_id,
)
from threadspindle.ingress.agent_commands import conversations_text, start_or_resume
from threadspindle.ingress.attachments import FILES_WITH_A_COMMAND, AttachmentRefused
from threadspindle.ingress.discord.translate import resolve_workdir
from threadspindle.ingress.input_checks import InputRefused
from threadspindle.ingress.refusal_notes import RefusalNotes
from threadspindle.ingress.runtime_port import RuntimePort
from threadspindle.ingress.slack import translate
from threadspindle.ingress.slack.catchup import SlackCatchUp
from threadspindle.ingress.slack.files import has_files, take_slack_files
from threadspindle.ingress.slack.settings import SlackSettings
from threadspindle.ingress.thread_commands import Spelling, thread_action, typed_prompt
from threadspindle.ingress.workspace_commands import is_shell_text
from threadspindle.runtime.core import actions as A

__all__ = ["NO_LONGER_PENDING", "REFUSAL", "RuntimePort", "SlackIngress", "envelope_key"]

_log = logging.getLogger(__name__)

T = TypeVar("T")

REFUSAL = "You are not allowed to drive agents here. Ask the app's owner to add you."
NO_LONGER_PENDING = "That prompt is no longer pending."
_REMEMBERED = 2048
_KINDS = ("events_api", "slash_commands", "interactive")
SPELLING = Spelling("@Spindle ", "-")  # commands in a thread follow a mention of the app


def envelope_key(payload: Mapping[str, Any]) -> str:
    """One envelope's key, readable both from the socket and from bolt's ``body`` (the
    same payload, parsed twice): Slack's own id, else a digest of the payload."""
    key = payload.get("event_id") or payload.get("trigger_id")
    if key:
        return str(key)
    canonical = json.dumps(payload, sort_keys=True, default=str).encode()
    return "#" + hashlib.blake2b(canonical, digest_size=16).hexdigest()


def help_text(agents: tuple[str, ...], command: str) -> str:
    names = " | ".join(agents)
    words = " · ".join(spelling.split(" ")[0] for spelling, _ in translate.COMMANDS)
    return (
        "Messages in a thread with a conversation are prompts for its agent (a message "
        'ending in " queue" waits its turn instead of interrupting, one ending in " steer" '
        "is added to the running turn; !<command> runs a shell command).\n"
        f"In a channel: {command} <agent> start [workdir] (agents: {names}) opens a thread.\n"
        f"In a thread, mention the app: @Spindle {words}"
    )


class SlackIngress(SlackCatchUp):
    def __init__(
        self,
        settings: SlackSettings,
        platform: SlackPlatform,
        runtime: RuntimePort,
        *,
        bot_user: str,
        team: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.platform = platform
        self.runtime = runtime
        self.bot_user = bot_user
        self.team = team
        self._clock = clock
        self._send, self._inbox = trio.open_memory_channel[tuple[str, dict[str, Any]]](math.inf)
        self._results: OrderedDict[str, asyncio.Future[str | None]] = OrderedDict()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._told = RefusalNotes(settings.refusal_interval_s)  # who was told they are refused
        self.handled = 0  # envelopes handled
        self.refusals = 0
        self.caught_up = 0  # messages found by catch_up (duplicates included)
        self._catching_up = False  # prompts found by catch_up are queued, not interrupting

    # --- the envelopes, in order -------------------------------------------------------------

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    async def on_envelope(self, client: Any, message: dict[str, Any], raw: Any = None) -> None:
        """A Socket Mode message listener: runs first for each frame, in arrival order."""
        kind = message.get("type")
        payload = message.get("payload")
        if kind in _KINDS and isinstance(payload, dict):
            self._send.send_nowait((str(kind), payload))

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Handles the envelopes one at a time until cancelled."""
        task_status.started()
        async for kind, payload in self._inbox:
            result: str | None = None
            try:
                result = await self.handle(kind, payload)
            except Exception:  # one bad envelope must not stop the app
                _log.exception("could not handle a %s envelope", kind)
            finally:
                self._settle(envelope_key(payload), result)

    def _future(self, key: str) -> asyncio.Future[str | None]:
        future = self._results.get(key)
        if future is None:
            assert self._loop is not None, "bind() first"
            future = self._results[key] = self._loop.create_future()
            while len(self._results) > _REMEMBERED:
                self._results.popitem(last=False)
        return future

    def _settle(self, key: str, result: str | None) -> None:
        future = self._future(key)
        if not future.done():
            future.set_result(result)

    async def settled(self, body: Mapping[str, Any], timeout: float = 60.0) -> str | None:
        """(asyncio side) Until the envelope of ``body`` is handled: the text to answer a
        slash command with, if any. Bolt acknowledges the envelope when this returns."""
        key = envelope_key(body)
        try:
            return await asyncio.wait_for(asyncio.shield(self._future(key)), timeout)
        finally:
            self._results.pop(key, None)

    async def handle(self, kind: str, payload: dict[str, Any]) -> str | None:
        self.handled += 1
        if kind == "slash_commands":
            return await self._slash(payload)
        if kind == "interactive":
            if payload.get("type") == "block_actions":
                await self._action(payload)
            return None
        event = payload.get("event") or {}
        if event.get("type") != "message":
            return None
        team = _author_team(event, payload.get("team_id"))
        subtype = event.get("subtype")
        if subtype == "message_changed":
            await self._edited(event, team)
        elif subtype == "message_deleted":
            await self._deleted(event, team)
        elif subtype in (None, "thread_broadcast", "file_share"):
            await self._message(event, team)
        return None

    # --- plumbing --------------------------------------------------------------------------

    async def _post(self, *actions: A.Action, channel_id: str | None = None) -> None:
        """Post in order and return once each is durable: only then is Slack answered."""
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

    async def _tell(self, channel: str, thread_ts: str | None, user: str, text: str) -> None:
        """A message only ``user`` sees, logged if it cannot go."""
        try:
            await self._retrying(lambda: self.platform.say_to(channel, thread_ts, user, text))
        except PlatformError as error:
            _log.warning("could not tell %s in %s: %s", user, channel, error)

    async def _say(self, channel: str, thread_ts: str | None, text: str) -> str | None:
        try:
            return await self._retrying(lambda: self.platform.say(channel, thread_ts, text))
        except PlatformError as error:
            _log.warning("could not answer in %s: %s", channel, error)
            return None

    def _has_conversation(self, thread_id: str | None) -> bool:
        state = self.runtime.snapshot(thread_id) if thread_id else None
        return state is not None and state.conversation is not None

    def _workdir(self, thread_id: str | None) -> str:
        state = self.runtime.snapshot(thread_id) if thread_id else None
        if state is not None and state.conversation is not None:
            return state.conversation.workdir
        return self.settings.default_workdir

    def _already(self, action_id: str) -> str | None:
        """The thread whose log already holds ``action_id`` (an envelope that posted an
        anchor message must not post a second one when it comes again)."""
        for thread_id, state in self.runtime.snapshots().items():
            if action_id in state.recent_action_ids:
                return thread_id
        return None

    def _allowed(self, user: str, team: str | None, channel: str) -> bool:
        if self.settings.is_allowed(user, team, self.team) and self.settings.serves_channel(
            channel
        ):
            return True
        self.refusals += 1
        _log.info("ignoring user %s (team %s) in %s: not allow-listed", user, team, channel)
        return False

    async def _refuse(self, channel: str, thread_ts: str | None, user: str) -> None:
        now = self._clock()
        if self._told.due(user, now):
            await self._tell(channel, thread_ts, user, REFUSAL)

    # --- messages ----------------------------------------------------------------------------

    async def _message(self, event: dict[str, Any], team: str | None) -> None:
        user = str(event.get("user") or "")
        text = str(event.get("text") or "")
        if not user or event.get("bot_id") or user == self.bot_user:
            return
        if not text.strip() and not has_files(event):
            return
        channel, ts = str(event.get("channel")), str(event.get("ts"))
        thread_ts = event.get("thread_ts")
        thread_ts = str(thread_ts) if thread_ts and thread_ts != ts else None
        thread_id = translate.thread_of(channel, thread_ts)
        command = translate.parse_mention_command(text, self.bot_user)
        project = self.settings.project_channel(channel) if thread_id is None else None
        addressed = command is not None or project is not None or self._has_conversation(thread_id)
        if not addressed:
            return  # people talking among themselves
        if not self._allowed(user, team, channel):
            await self._refuse(channel, thread_ts or ts, user)
            return
        if command is not None:
            try:
                if has_files(event):
                    raise InputRefused(FILES_WITH_A_COMMAND)
                await self._command(event, command, thread_id)
            except InputRefused as refused:
                await self._tell(channel, thread_ts or ts, user, str(refused))
            return
        if thread_id is not None:
            await self._prompt(event, thread_id, text)
        elif project is not None:
            await self._project_message(event, project.agent, project.workdir, text)

    async def _prompt(self, event: dict[str, Any], thread_id: str, text: str) -> None:
        """A message in a thread: a prompt (interrupting, queued by `` queue``, steered by
        `` steer``; without a suffix as ``plain_message`` says) or a shell command (``!``)."""
        user, channel, ts = str(event["user"]), str(event["channel"]), str(event["ts"])
        if has_files(event) and is_shell_text(text):
            # A `!` command takes no files: refused before any is saved.
            await self._tell(channel, parse_thread_id(thread_id)[1], user, FILES_WITH_A_COMMAND)
            return
        try:
            attachments = await take_slack_files(
                event,
                workdir=self._workdir(thread_id),
                bot_token=self.settings.bot_token,
                api_base_url=self.settings.base_url,
                max_bytes=self.settings.attachment_max_bytes,
            )
        except AttachmentRefused as refused:
            await self._tell(
                channel, parse_thread_id(thread_id)[1], user, f"⚠ Not sent to the agent: {refused}"
            )
            return
        common = {
            "thread_id": thread_id,
            "action_id": translate.message_action_id(channel, ts),
            "at": self._clock(),
        }
        try:
            action = typed_prompt(
                text,
                common,
                author_id=user,
                author_name=_display_name(event),
                source_message_id=ts,
                queue_suffix=self.settings.queue_suffix,
                steer_suffix=self.settings.steer_suffix,
                # All said while away came before anything runs now: none interrupts another.
                mode="queue" if self._catching_up else self.settings.plain_message,
                attachments=attachments,
            )
        except InputRefused as refused:  # a shell command too long
            await self._tell(channel, parse_thread_id(thread_id)[1], user, str(refused))
            return
        self.platform.remember_author(action.action_id, user)
        await self._post(action, channel_id=channel)

    async def _project_message(
        self, event: dict[str, Any], agent: str, workdir: str, text: str
    ) -> None:
        """A top-level message in a project channel: a conversation in its own thread, the
        message its first prompt."""
        channel, ts = str(event["channel"]), str(event["ts"])
        thread_id = slack_thread_id(channel, ts)
        start = A.ConversationStarted(
            thread_id=thread_id,
            action_id=translate.start_action_id(channel, ts),
            at=self._clock(),
            agent=agent,
            requested_workdir=workdir,
            resolved_workdir=resolve_workdir(workdir, self.settings.default_workdir),
        )
        await self._post(start, channel_id=channel)
        await self._prompt(event, thread_id, text)

    def _queued_here(self, thread_id: str, ts: str) -> bool:
        state = self.runtime.snapshot(thread_id)
        return state is not None and any(item.source_message_id == ts for item in state.queue)

    async def _edited(self, event: dict[str, Any], team: str | None) -> None:
        message = event.get("message") or {}
        previous = event.get("previous_message") or {}
        channel, ts = str(event.get("channel")), str(message.get("ts"))
        thread_id = translate.thread_of(channel, message.get("thread_ts"))
        user = str(message.get("user") or "")
        if thread_id is None or not self._queued_here(thread_id, ts):
            return  # only a prompt still waiting can change
        if not self.settings.is_allowed(user, team, self.team):
            return
        edited = message.get("edited") or {}
        action = translate.edit_action(
            thread_id=thread_id,
            channel=channel,
            ts=ts,
            text=str(message.get("text") or ""),
            previous_text=str(previous.get("text") or ""),
            edit_ts=str(edited.get("ts") or event.get("ts")),
            at=self._clock(),
            suffix=self.settings.queue_suffix,
        )
        await self._post(action)

    async def _deleted(self, event: dict[str, Any], team: str | None) -> None:
        previous = event.get("previous_message") or {}
        channel, ts = str(event.get("channel")), str(event.get("deleted_ts"))
        thread_id = translate.thread_of(channel, previous.get("thread_ts"))
        if thread_id is None or not self._queued_here(thread_id, ts):
            return
        await self._post(
            translate.delete_action(thread_id=thread_id, channel=channel, ts=ts, at=self._clock())
        )

    # --- commands -------------------------------------------------------------------------------

    async def _command(
        self, event: dict[str, Any], command: translate.ParsedCommand, thread_id: str | None
    ) -> None:
        """``@Spindle <command>`` in a message (in a thread, or top-level in a channel)."""
        user, channel, ts = str(event["user"]), str(event["channel"]), str(event["ts"])
        name, args = command.name, command.args
        words = args.split()
        where = parse_thread_id(thread_id)[1] if thread_id else ts
        if name in self.settings.agents:
            sub = words[0].lower() if words else "start"
            rest = args[len(words[0]) :].strip() if words else ""
            action_id = translate.message_action_id(channel, ts)
            text = await self._agent_command(
                name, sub, rest, channel, thread_id or slack_thread_id(channel, ts), action_id
            )
            if text is not None:
                await self._tell(channel, where, user, text)
            return
        if name == "help":
            await self._tell(
                channel, where, user, help_text(self.settings.agents, self.settings.command)
            )
            return
        if thread_id is None or not self._has_conversation(thread_id):
            hint = f"No conversation here: start one with {self.settings.command} claude start."
            await self._tell(channel, where, user, hint)
            return
        action_id = translate.message_action_id(channel, ts)
        self.platform.remember_author(action_id, user)
        action = self._thread_command(name, args, thread_id, action_id, user, ts)
        await self._post(action, channel_id=channel)

    def _thread_command(
        self, name: str, args: str, thread_id: str, action_id: str, user: str, ts: str | None
    ) -> A.Action:
        common: dict[str, Any] = {
            "thread_id": thread_id,
            "action_id": action_id,
            "at": self._clock(),
        }
        return thread_action(
            name,
            args,
            common,
            author_id=user,
            author_name=user,
            source_message_id=ts,
            workdir=self._workdir(thread_id),
            spelling=SPELLING,
        )

    async def _agent_command(
        self, agent: str, sub: str, args: str, channel: str, thread_id: str, action_id: str
    ) -> str | None:
        """``<agent> start|resume|conversations`` in ``thread_id``: the text to tell the
        user (None: the core answers in the thread)."""
        if sub == "conversations":
            return conversations_text(agent, self._workdir(thread_id))
        session, requested = start_or_resume(agent, sub, args, self.settings.default_workdir, agent)
        resolved = resolve_workdir(requested, self._workdir(thread_id))
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
        await self._post(action, channel_id=channel)
        return None

    async def _slash(self, payload: dict[str, Any]) -> str | None:
        """``/spindle …`` typed in a channel: the text of the (ephemeral) answer."""
        user, channel = str(payload.get("user_id")), str(payload.get("channel_id"))
        if not self._allowed(user, payload.get("team_id"), channel):
            return REFUSAL
        command = translate.parse_command(str(payload.get("text") or "")) or (
            translate.ParsedCommand("help", "")
        )
        name, args = command.name, command.args
        usage = help_text(self.settings.agents, self.settings.command)
        if name not in self.settings.agents:
            if name == "help":
                return usage
            return (
                f"Slack runs no slash command inside a thread, so in a thread write "
                f"@Spindle {name} {args}".rstrip()
                + ".\n"
                + usage
            )
        words = args.split()
        sub = words[0].lower() if words else "start"
        rest = args[len(words[0]) :].strip() if words else ""
        action_id = translate.slash_action_id(str(payload.get("trigger_id")))
        try:
            if sub == "conversations":
                return await self._agent_command(
                    name, sub, rest, channel, "sl:" + channel + ":0.0", action_id
                )
            thread_id = self._already(action_id)
            if thread_id is None:
                # The conversation's thread hangs off a message of the app's own.
                anchor = await self._say(
                    channel, None, f"*{name}* conversation: reply in this thread."
                )
                if anchor is None:
                    return "Could not post in this channel: is the app a member of it?"
                thread_id = slack_thread_id(channel, anchor)
            return await self._agent_command(name, sub, rest, channel, thread_id, action_id)
        except InputRefused as refused:
            return str(refused)

    # --- buttons ---------------------------------------------------------------------------

    async def _action(self, payload: dict[str, Any]) -> None:
        who = payload.get("user") or {}
        user, team = str(who.get("id") or ""), who.get("team_id")
        container = payload.get("container") or {}
        message = payload.get("message") or {}
        channel = str((payload.get("channel") or {}).get("id") or container.get("channel_id"))
        thread_ts = message.get("thread_ts") or container.get("thread_ts")
        (action,) = (payload.get("actions") or [{}])[:1]
        if not self._allowed(user, team, channel):
            await self._tell(channel, thread_ts, user, REFUSAL)
            return
        value = action.get("value")
        label = ((action.get("text") or {}).get("text")) if value is not None else None
        if value is None:
            option = action.get("selected_option") or {}
            value, label = option.get("value"), (option.get("text") or {}).get("text")
        kind, target, detail = translate.parse_callback(str(value or ""))
        thread_id = translate.thread_of(channel, thread_ts)
        state = self.runtime.snapshot(thread_id) if thread_id else None
        if thread_id is None or state is None or not kind:
            await self._tell(channel, thread_ts, user, NO_LONGER_PENDING)
            return
        common: dict[str, Any] = {
            "thread_id": thread_id,
            "action_id": translate.button_action_id(user, str(action.get("action_ts"))),
            "at": self._clock(),
        }
        if kind == "remove_queued":
            if not any(item.id == target for item in state.queue):
                await self._tell(channel, thread_ts, user, "That prompt is no longer queued.")
                return
            self.platform.remember_author(common["action_id"], user)
            await self._post(A.QueuedItemRemoved(**common, item_id=target))
            return
        if not any(b.request_id == target and b.kind == kind for b in state.blockers):
            await self._tell(channel, thread_ts, user, NO_LONGER_PENDING)
            return
        answer: A.Action
        if kind == "permission":
            answer = A.PermissionAnswered(
                **common, request_id=target, allow=detail == "allow", author_id=user
            )
        else:
            answer = A.QuestionAnswered(
                **common, request_id=target, answer=str(label or ""), author_id=user
            )
        await self._post(answer)


def _display_name(event: Mapping[str, Any]) -> str:
    """The author's name as Slack put it in the event (``user_profile``, when it did),
    else the user id: looking names up would take ``users:read`` and a call per user."""
    profile = event.get("user_profile") or {}
    for key in ("display_name", "real_name", "name"):
        if profile.get(key):
            return str(profile[key])
    return str(event.get("user") or "?")


def _author_team(event: dict[str, Any], installed: object) -> str | None:
    """The workspace of the message's author. In a shared channel (Slack Connect) the
    envelope's ``team_id`` is the workspace the app is installed in, whoever wrote: taken
    first, it let an allow-listed user id pass ``allowed_team_ids`` from any workspace
    sharing the channel. The event says whose (``user_team``, else ``team``; an edit's in
    its ``message``)."""
    message = event.get("message") if event.get("subtype") == "message_changed" else event
    if isinstance(message, dict):
        for key in ("user_team", "team"):
            value = message.get(key)
            if isinstance(value, str) and value:
                return value
    return installed if isinstance(installed, str) and installed else None

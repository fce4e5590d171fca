"""One way to drive any chat platform end to end, for ``tests/platforms/test_platform_contract.py``.

A ``PlatformDriver`` runs the production wiring of one platform against its fake (the real
chat library on 127.0.0.1, the live runtime on a real SQLite log, the scripted fake agent
``testkit.fake_discord.stack.SCRIPT``) and acts as the platform's users do: say something in
a thread, press a button, read what the bot shows. The contract test runs one script over
every driver; a new platform adds a driver here (a class with these methods, and a line in
``DRIVERS``) and must pass the same script.

A driver says what its platform has (``has_strangers``: users who are not allowed can
write where the bot reads; ``injects_faults``: a server whose sends can be made to fail;
``opens_threads``: ``/fork`` and ``/btw`` can open a new thread, which a WhatsApp chat
cannot): a case of the script that needs what a platform lacks is not collected for it
(``drivers_with``), rather than skipped at run time. The console (one user at a terminal,
no server) has neither.

Threads are named by the driver's own string (``str`` of a Discord channel id, a Telegram
``tg:`` thread id, a WhatsApp ``wa:`` chat, a Slack ``sl:`` thread id, a web chat ``web:``
thread); ``running()`` may be entered again on the same log: a restart.
"""

from __future__ import annotations

import io
import math
import os
import re
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, Protocol

import trio

from threadspindle.effects.console_markup import render_controls
from threadspindle.effects.console_platform import CONSOLE_LIMITS, ConsoleMessage, ConsolePlatform
from threadspindle.effects.web_platform import WEB_LIMITS
from threadspindle.ingress.console import ConsoleChat, open_console, thread_id_for
from threadspindle.runtime.core.actions import Action
from threadspindle.runtime.core.model import Policy, ThreadState
from threadspindle.runtime.live.log import EventLog
from threadspindle.testkit.fake_agent import FakeAgentWorld
from threadspindle.testkit.fake_discord.harness import World, fake_world, wait_for
from threadspindle.testkit.fake_discord.stack import FOOTER, SCRIPT, Stack, discord_stack
from threadspindle.testkit.fake_slack.stack import (
    SlackStack,
    SlackWorld,
    slack_stack,
    slack_world,
)
from threadspindle.testkit.fake_telegram.stack import (
    TelegramStack,
    TelegramWorld,
    telegram_stack,
    telegram_world,
)
from threadspindle.testkit.fake_whatsapp.server import WaMessage
from threadspindle.testkit.fake_whatsapp.stack import (
    WhatsAppStack,
    WhatsAppWorld,
    whatsapp_stack,
    whatsapp_world,
)
from threadspindle.testkit.web_stack import WebStack, web_stack

__all__ = [
    "CAPABILITIES",
    "DRIVERS",
    "DRIVER_TYPES",
    "ConsoleDriver",
    "DiscordDriver",
    "PlatformDriver",
    "SlackDriver",
    "TelegramDriver",
    "WebDriver",
    "WhatsAppDriver",
    "drivers_with",
    "is_footer_text",
    "typed_controls",
]

# What a platform may lack, each a boolean class attribute of every driver.
CAPABILITIES = ("has_strangers", "injects_faults", "opens_threads")


def is_footer_text(text: str) -> bool:
    """The footer the fake agent's runs end with (``2.1s · $0.0010 · …``)."""
    return bool(FOOTER.match(text))


class PlatformDriver(Protocol):
    """What the contract script needs of a platform (see the module docstring)."""

    name: str
    has_strangers: bool  # someone not allowed can write where the bot reads
    injects_faults: bool  # the platform's sends can be made to fail (``fail_next_sends``)
    opens_threads: bool  # /fork and /btw can open a new thread (a WhatsApp chat cannot)

    def running(self) -> AbstractAsyncContextManager[None]:
        """The platform's bot over the runtime, on the driver's log, while inside."""
        ...

    @property
    def agents(self) -> FakeAgentWorld:
        """The fake agents of the current run: ``delivered`` prompts, permission ``answers``."""
        ...

    async def start(self) -> str:
        """A new thread with a conversation (agent ``claude``, the scripted fake)."""
        ...

    def say(self, thread: str, text: str, *, stranger: bool = False) -> None:
        """A message in ``thread`` from an allowed user (``stranger``: one not allowed)."""
        ...

    def abort(self, thread: str) -> None:
        """An allowed user's abort command in ``thread``, in the platform's spelling."""
        ...

    def command(self, thread: str, name: str, args: str = "") -> None:
        """An allowed user's thread command ``name`` (docs/commands.md's name: ``steer``,
        ``btw``, ``undo``, ...) with its one argument, in the platform's spelling."""
        ...

    def bot_texts(self, thread: str) -> list[str]:
        """What the bot shows in ``thread`` now, one text per message, oldest first."""
        ...

    def buttons(self, thread: str) -> list[tuple[str, str]]:
        """The clickable buttons in ``thread``: (message, label), oldest first."""
        ...

    def click(self, thread: str, message: str, label: str) -> None:
        """An allowed user presses ``label`` on ``message``."""
        ...

    async def until_footers(self, thread: str, count: int, timeout: float = 20.0) -> None:
        """Until ``thread`` shows ``count`` footers and every edit has been made."""
        ...

    def snapshot(self, thread: str) -> ThreadState | None: ...

    takes_files: bool  # files are attached (``files``); elsewhere their text is shown

    async def post(self, action: Action) -> None:
        """Hand ``action`` to the runtime as ingress would (what a job reports back)."""
        ...

    def files(self, thread: str) -> list[tuple[str, bytes, str]]:
        """The files the bot attached in ``thread``: (name, content, caption)."""
        ...

    def fail_next_sends(self, status: int, times: int) -> None:
        """The platform's API answers the next ``times`` message sends with ``status``
        (429 with a short retry-after, or a 5xx)."""
        ...

    @property
    def char_limit(self) -> int: ...


class DiscordDriver:
    """discord.py against ``testkit.fake_discord``."""

    name = "discord"
    char_limit = 2000
    has_strangers = True
    injects_faults = True
    opens_threads = True

    def __init__(self, world: World, tmp_path: Path) -> None:
        self.world = world
        self.tmp_path = tmp_path
        self._stack: Stack | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with discord_stack(self.world, self.tmp_path) as stack:
            self._stack = stack
            yield

    @property
    def stack(self) -> Stack:
        assert self._stack is not None, "not running"
        return self._stack

    @property
    def agents(self) -> FakeAgentWorld:
        return self.stack.agents

    async def start(self) -> str:
        return str(await self.stack.start_thread())

    def say(self, thread: str, text: str, *, stranger: bool = False) -> None:
        user = self.world.mallory if stranger else self.world.alice
        self.world.fake.send_message(int(thread), user, text)

    def abort(self, thread: str) -> None:
        self.world.fake.run_command(int(thread), self.world.alice, "abort")

    def command(self, thread: str, name: str, args: str = "") -> None:
        option = {"steer": "message", "queue": "message", "btw": "question"}.get(name)
        options = {option: args} if option and args else {}
        self.world.fake.run_command(int(thread), self.world.alice, name, **options)

    def _bot_messages(self, thread: str) -> list[Any]:
        bot = self.world.fake.bot_user_id
        return [
            m
            for m in self.world.fake.messages(int(thread))
            if m.author_id == bot and not m.deleted and not m.ephemeral
        ]

    def bot_texts(self, thread: str) -> list[str]:
        return [m.content for m in self._bot_messages(thread)]

    def buttons(self, thread: str) -> list[tuple[str, str]]:
        """Buttons, and each option of a select menu (Discord shows a question's options in
        one), as one choice each."""
        out: list[tuple[str, str]] = []
        for m in self._bot_messages(thread):
            for row in m.components:
                for item in row.get("components", []):
                    if item.get("disabled"):
                        continue
                    if item.get("type") == 2:
                        out.append((str(m.id), item["label"]))
                    elif item.get("type") == 3:
                        out += [(str(m.id), o["label"]) for o in item.get("options", [])]
        return out

    def click(self, thread: str, message: str, label: str) -> None:
        fake = self.world.fake
        found = fake.message(int(message))
        for row in found.components:
            for item in row.get("components", []):
                if item.get("type") == 2 and item.get("label") == label:
                    fake.click_button(int(message), item["custom_id"], self.world.alice)
                    return
                for option in item.get("options", []) if item.get("type") == 3 else ():
                    if option["label"] == label:
                        fake.choose_option(
                            int(message), item["custom_id"], [option["value"]], self.world.alice
                        )
                        return
        raise AssertionError(f"no {label!r} on message {message}")

    async def until_footers(self, thread: str, count: int, timeout: float = 20.0) -> None:
        await self.stack.until_footers(int(thread), count, timeout)

    def snapshot(self, thread: str) -> ThreadState | None:
        return self.stack.runtime.snapshot(thread)

    takes_files = True

    async def post(self, action: Action) -> None:
        await (await self.stack.runtime.post(action)).durable()

    def files(self, thread: str) -> list[tuple[str, bytes, str]]:
        return [
            (a.filename, bytes(a.content), m.content)
            for m in self._bot_messages(thread)
            for a in m.attachments
        ]

    def fail_next_sends(self, status: int, times: int) -> None:
        self.world.fake.inject_fault(
            status, method="POST", path_contains="/messages", times=times, retry_after=0.3
        )


class TelegramDriver:
    """python-telegram-bot against ``testkit.fake_telegram`` (a thread is a forum topic)."""

    name = "telegram"
    char_limit = 4096
    has_strangers = True
    injects_faults = True
    opens_threads = True

    def __init__(self, world: TelegramWorld, tmp_path: Path) -> None:
        self.world = world
        self.tmp_path = tmp_path
        self._stack: TelegramStack | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with telegram_stack(self.world, self.tmp_path) as stack:
            self._stack = stack
            yield

    @property
    def stack(self) -> TelegramStack:
        assert self._stack is not None, "not running"
        return self._stack

    @property
    def agents(self) -> FakeAgentWorld:
        return self.stack.agents

    async def start(self) -> str:
        return await self.stack.start_topic()

    def say(self, thread: str, text: str, *, stranger: bool = False) -> None:
        self.world.say(thread, text, self.world.mallory if stranger else None)

    def abort(self, thread: str) -> None:
        self.world.say(thread, "/abort")

    def command(self, thread: str, name: str, args: str = "") -> None:
        self.world.say(thread, f"/{name} {args}".rstrip())

    def bot_texts(self, thread: str) -> list[str]:
        return [m.text for m in self.world.bot_messages(thread)]

    def buttons(self, thread: str) -> list[tuple[str, str]]:
        return [
            (str(m.message_id), b["text"])
            for m in self.world.bot_messages(thread)
            for b in m.buttons()
        ]

    def click(self, thread: str, message: str, label: str) -> None:
        chat, _ = self.world.where(thread)
        found = self.world.fake.message(chat, int(message))
        (data,) = [b["callback_data"] for b in found.buttons() if b["text"] == label]
        self.world.fake.click(chat, int(message), data, self.world.alice)

    async def until_footers(self, thread: str, count: int, timeout: float = 20.0) -> None:
        await self.stack.until_footers(thread, count, timeout)

    def snapshot(self, thread: str) -> ThreadState | None:
        return self.stack.runtime.snapshot(thread)  # type: ignore[no-any-return]

    takes_files = True

    async def post(self, action: Action) -> None:
        await (await self.stack.runtime.post(action)).durable()

    def files(self, thread: str) -> list[tuple[str, bytes, str]]:
        files = self.world.fake.world.files
        return [
            (m.document["file_name"], files[m.document["file_id"]], m.text)
            for m in self.world.bot_messages(thread)
            if m.document is not None
        ]

    def fail_next_sends(self, status: int, times: int) -> None:
        self.world.fake.inject_fault(status, method="sendMessage", times=times, retry_after=1)


class WhatsAppDriver:
    """The WhatsApp webhook and Graph API client against ``testkit.fake_whatsapp``.

    WhatsApp has no threads and no edits, so two things read differently here:

    - a thread is one user's chat: each ``start`` is a fresh allow-listed user, and a
      stranger (``say(..., stranger=True)``) can only write in their own chat;
    - a sent message's buttons cannot be taken away. The platform closes a prompt by a
      message quoting it with the outcome (the renderer's dismissal), so the buttons the
      chat still offers are those of prompts no later bot message quotes; a press on a
      closed one is answered "no longer pending" and changes nothing.
    """

    name = "whatsapp"
    char_limit = 4096
    has_strangers = True
    injects_faults = True
    opens_threads = False

    def __init__(self, world: WhatsAppWorld, tmp_path: Path) -> None:
        self.world = world
        self.tmp_path = tmp_path
        self._stack: WhatsAppStack | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with whatsapp_stack(self.world, self.tmp_path) as stack:
            self._stack = stack
            yield

    @property
    def stack(self) -> WhatsAppStack:
        assert self._stack is not None, "not running"
        return self._stack

    @property
    def agents(self) -> FakeAgentWorld:
        return self.stack.agents

    async def start(self) -> str:
        return await self.stack.start_chat()

    def say(self, thread: str, text: str, *, stranger: bool = False) -> None:
        self.world.fake.say(self.world.mallory if stranger else self.world.chat(thread), text)

    def abort(self, thread: str) -> None:
        self.world.fake.say(self.world.chat(thread), "/abort")

    def command(self, thread: str, name: str, args: str = "") -> None:
        self.world.fake.say(self.world.chat(thread), f"/{name} {args}".rstrip())

    def bot_texts(self, thread: str) -> list[str]:
        return [m.text for m in self.world.bot_messages(thread)]

    def _open_prompts(self, thread: str) -> list[WaMessage]:
        messages = self.world.bot_messages(thread)
        quoted = {m.context for m in messages if m.context is not None}
        return [m for m in messages if m.choices() and m.id not in quoted]

    def buttons(self, thread: str) -> list[tuple[str, str]]:
        """Reply buttons and list rows, each one choice."""
        return [(m.id, c["title"]) for m in self._open_prompts(thread) for c in m.choices()]

    def click(self, thread: str, message: str, label: str) -> None:
        self.world.fake.click(self.world.chat(thread), message, label)

    async def until_footers(self, thread: str, count: int, timeout: float = 20.0) -> None:
        await self.stack.until_footers(thread, count, timeout)

    def snapshot(self, thread: str) -> ThreadState | None:
        return self.stack.runtime.snapshot(thread)  # type: ignore[no-any-return]

    takes_files = False  # a WhatsApp document needs a media upload first: the text instead

    async def post(self, action: Action) -> None:
        await (await self.stack.runtime.post(action)).durable()

    def files(self, thread: str) -> list[tuple[str, bytes, str]]:
        return []

    def fail_next_sends(self, status: int, times: int) -> None:
        self.world.fake.inject_fault(
            status, times=times, retry_after=0.3 if status == 429 else None
        )


class SlackDriver:
    """slack-bolt (Socket Mode) against ``testkit.fake_slack`` (a thread is a Slack thread
    hanging off the app's anchor message; commands in it are ``@Spindle …``)."""

    name = "slack"
    char_limit = 3000  # what one section block holds (Slack advises 4,000 for a text)
    has_strangers = True
    injects_faults = True
    opens_threads = True

    def __init__(self, world: SlackWorld, tmp_path: Path) -> None:
        self.world = world
        self.tmp_path = tmp_path
        self._stack: SlackStack | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with slack_stack(self.world, self.tmp_path) as stack:
            self._stack = stack
            yield

    @property
    def stack(self) -> SlackStack:
        assert self._stack is not None, "not running"
        return self._stack

    @property
    def agents(self) -> FakeAgentWorld:
        return self.stack.agents

    async def start(self) -> str:
        return await self.stack.start_thread()

    def say(self, thread: str, text: str, *, stranger: bool = False) -> None:
        self.world.say(thread, text, self.world.mallory if stranger else None)

    def abort(self, thread: str) -> None:
        self.world.command(thread, "abort")

    def command(self, thread: str, name: str, args: str = "") -> None:
        self.world.command(thread, f"{name} {args}".rstrip())  # @Spindle <name> <args>

    def bot_texts(self, thread: str) -> list[str]:
        return [m.shown for m in self.world.bot_messages(thread)]

    def buttons(self, thread: str) -> list[tuple[str, str]]:
        """Buttons, and each option of a static select, as one choice each."""
        out: list[tuple[str, str]] = []
        for m in self.world.bot_messages(thread):
            for element in m.buttons():
                if element["type"] == "button":
                    out.append((m.ts, element["text"]["text"]))
                else:
                    out += [(m.ts, o["text"]["text"]) for o in element["options"]]
        return out

    def click(self, thread: str, message: str, label: str) -> None:
        channel, _ = self.world.where(thread)
        found = self.world.fake.message(channel, message)
        for element in found.buttons():
            if element["type"] == "button" and element["text"]["text"] == label:
                self.world.fake.click(channel, message, element["action_id"], self.world.alice)
                return
            for option in element.get("options", []):
                if option["text"]["text"] == label:
                    self.world.fake.click(
                        channel, message, element["action_id"], self.world.alice, option["value"]
                    )
                    return
        raise AssertionError(f"no {label!r} on message {message}")

    async def until_footers(self, thread: str, count: int, timeout: float = 20.0) -> None:
        await self.stack.until_footers(thread, count, timeout)

    def snapshot(self, thread: str) -> ThreadState | None:
        return self.stack.runtime.snapshot(thread)  # type: ignore[no-any-return]

    takes_files = True

    async def post(self, action: Action) -> None:
        await (await self.stack.runtime.post(action)).durable()

    def files(self, thread: str) -> list[tuple[str, bytes, str]]:
        return [
            (f["name"], f["data"], m.text) for m in self.world.bot_messages(thread) for f in m.files
        ]

    def fail_next_sends(self, status: int, times: int) -> None:
        self.world.fake.inject_fault(status, method="chat.postMessage", times=times, retry_after=1)


_CONTROL = re.compile(r"^(?P<label>.+?): (?P<command>/\S.*)$")
_ANSWER = re.compile(r"^/answer (?P<id>\S+) <(?P<options>.*)>$")


def typed_controls(message: ConsoleMessage) -> list[tuple[str, str]]:
    """What the console shows under ``message`` instead of buttons, read back as
    ``(label, command to type)``; a control shown without a command gives nothing."""
    shown = render_controls(message.buttons, message.menu).removeprefix("→ ")
    found: list[tuple[str, str]] = []
    for part in shown.split("  ·  ") if shown else ():
        if answer := _ANSWER.match(part):
            found += [
                (option, f"/answer {answer['id']} {option}")
                for option in answer["options"].split(" | ")
            ]
        elif control := _CONTROL.match(part):
            found.append((control["label"], control["command"]))
    return found


class ConsoleDriver:
    """The console as ``spindle run`` wires it (``ingress.console.open_console``) on the plain
    ``ConsolePlatform``; a thread is a named console thread (``console:<name>``).

    Everything the user does is a typed line through ``ConsoleChat.handle_line``, in order,
    after ``/thread new|switch <name>`` when it is for another thread than the current one.
    The console has no buttons: a message shows its controls as the commands to type
    (``effects.console_markup``), ``buttons`` reads them back and ``click`` types the one
    shown for the label. One user at a terminal and no server: no strangers, no faults. The
    terminal outlives each run: after a restart the new output is printed below the old.
    """

    name = "console"
    char_limit = CONSOLE_LIMITS.char_limit
    has_strangers = False
    injects_faults = False
    opens_threads = True

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.workdir = os.path.realpath(tmp_path)
        self.out = io.StringIO()  # the transcript of the console platform
        self.notes = io.StringIO()  # what the console chat says of its own
        self.platform = ConsolePlatform(self.out, rich=False)
        self._chat: ConsoleChat | None = None
        self._agents: FakeAgentWorld | None = None
        self._typed: trio.MemorySendChannel[tuple[str, str | None]] | None = None
        self._threads = 0

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        agents = FakeAgentWorld(script=SCRIPT)
        policy = Policy(allowed_roots=(self.workdir,), queue_limit=50)
        typed, lines = trio.open_memory_channel[tuple[str, str | None]](math.inf)
        with EventLog(self.tmp_path / "events.sqlite3") as log:
            async with open_console(
                self.platform,
                out=self.notes,
                default_agent="claude",
                default_workdir=self.workdir,
                log=log,
                adapter_factory=agents.factory,
                policy=policy,
                tick_interval_s=0.25,
            ) as chat:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._type, chat, lines)
                    self._chat, self._agents, self._typed = chat, agents, typed
                    try:
                        yield
                    finally:
                        self._chat = self._typed = None
                        nursery.cancel_scope.cancel()

    async def _type(
        self, chat: ConsoleChat, lines: trio.MemoryReceiveChannel[tuple[str, str | None]]
    ) -> None:
        async for thread, line in lines:
            name = thread.removeprefix("console:")
            if chat.current != name:
                verb = "switch" if name in chat.names else "new"
                await chat.handle_line(f"/thread {verb} {name}")
            if line is not None:
                await chat.handle_line(line)

    def _line(self, thread: str, line: str | None) -> None:
        assert self._typed is not None, "not running"
        self._typed.send_nowait((thread, line))

    @property
    def chat(self) -> ConsoleChat:
        assert self._chat is not None, "not running"
        return self._chat

    @property
    def agents(self) -> FakeAgentWorld:
        assert self._agents is not None, "not running"
        return self._agents

    async def start(self) -> str:
        """``/thread new t<n>``: a new thread, given a conversation with the default agent."""
        self._threads += 1
        thread = thread_id_for(f"t{self._threads}")
        self._line(thread, None)
        await wait_for(
            lambda: self.chat.runtime.snapshot(thread),
            lambda s: s is not None and s.conversation is not None,
        )
        await wait_for(lambda: any("Started" in t for t in self.bot_texts(thread)))
        return thread

    def say(self, thread: str, text: str, *, stranger: bool = False) -> None:
        assert not stranger, "the console has no strangers (has_strangers is False)"
        self._line(thread, text)

    def abort(self, thread: str) -> None:
        self._line(thread, "/abort")

    def command(self, thread: str, name: str, args: str = "") -> None:
        self._line(thread, f"/{name} {args}".rstrip())

    def _shown(self, thread: str) -> list[ConsoleMessage]:
        return [
            m
            for m in list(self.platform.messages.values())
            if m.channel_id == thread and not m.deleted
        ]

    def bot_texts(self, thread: str) -> list[str]:
        return [m.text for m in self._shown(thread)]

    def buttons(self, thread: str) -> list[tuple[str, str]]:
        """Each control a message shows as a command, (message, label)."""
        return [(m.id, label) for m in self._shown(thread) for label, _ in typed_controls(m)]

    def click(self, thread: str, message: str, label: str) -> None:
        """Type the command the message shows for ``label``."""
        commands = [
            c for shown, c in typed_controls(self.platform.messages[message]) if shown == label
        ]
        assert commands, f"no {label!r} on message {message}"
        self._line(thread, commands[0])

    async def until_footers(self, thread: str, count: int, timeout: float = 20.0) -> None:
        await wait_for(
            lambda: self.bot_texts(thread),
            lambda texts: sum(map(is_footer_text, texts)) >= count,
            timeout,
        )
        await self.chat.runtime.wait_quiet(thread)
        await wait_for(
            lambda: [r.statistics().dirty_messages for r in self.chat.renderers.values()],
            lambda dirty: not any(dirty),
            timeout,
        )

    def snapshot(self, thread: str) -> ThreadState | None:
        return self.chat.runtime.snapshot(thread)

    takes_files = False  # a terminal: the text instead

    async def post(self, action: Action) -> None:
        await (await self.chat.runtime.post(action)).durable()

    def files(self, thread: str) -> list[tuple[str, bytes, str]]:
        return []

    def fail_next_sends(self, status: int, times: int) -> None:
        raise AssertionError("the console has no server to fail (injects_faults is False)")


class WebDriver:
    """The web chat over HTTP (``testkit.web_stack``): what a browser's page would send.
    A thread is a ``web:`` thread; a stranger is a request without the access cookie."""

    name = "web"
    char_limit = WEB_LIMITS.char_limit
    has_strangers = True  # a request without the access cookie
    injects_faults = True
    opens_threads = True

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self._stack: WebStack | None = None
        self._last: WebStack | None = None  # what the stopped run showed stays readable

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with web_stack(self.tmp_path) as stack:
            self._stack = self._last = stack
            try:
                yield
            finally:
                self._stack = None

    @property
    def stack(self) -> WebStack:
        assert self._stack is not None, "not running"
        return self._stack

    @property
    def agents(self) -> FakeAgentWorld:
        return self.stack.agents

    async def start(self) -> str:
        return await self.stack.start()

    def say(self, thread: str, text: str, *, stranger: bool = False) -> None:
        self.stack.request("POST", f"/t/{thread}/say", {"text": text}, cookie=not stranger)

    def abort(self, thread: str) -> None:
        self.stack.request("POST", f"/t/{thread}/button", {"action": "abort"})

    def command(self, thread: str, name: str, args: str = "") -> None:
        self.say(thread, f"/{name} {args}".rstrip())

    def bot_texts(self, thread: str) -> list[str]:
        stack = self._stack or self._last
        assert stack is not None, "never ran"
        return [m.text for m in stack.bot_messages(thread)]

    def buttons(self, thread: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for m in self.stack.bot_messages(thread):
            out += [(m.id, b.label) for b in m.buttons]
            out += [(m.id, option) for option in (m.menu.options if m.menu else ())]
        return out

    def click(self, thread: str, message: str, label: str) -> None:
        found = self.stack.platform.view(thread).get(message)
        assert found is not None, f"no message {message}"
        for button in found.buttons:
            if button.label == label:
                self.stack.request("POST", f"/t/{thread}/button", {"action": button.action})
                return
        if found.menu is not None and label in found.menu.options:
            body = {"action": found.menu.custom_id, "answer": label}
            self.stack.request("POST", f"/t/{thread}/button", body)
            return
        raise AssertionError(f"no {label!r} on message {message}")

    async def until_footers(self, thread: str, count: int, timeout: float = 20.0) -> None:
        await self.stack.until_footers(thread, count, timeout)

    def snapshot(self, thread: str) -> ThreadState | None:
        return self.stack.runtime.snapshot(thread)  # type: ignore[no-any-return]

    takes_files = False  # the page shows no downloads: the text instead

    async def post(self, action: Action) -> None:
        await (await self.stack.runtime.post(action)).durable()

    def files(self, thread: str) -> list[tuple[str, bytes, str]]:
        return []

    def fail_next_sends(self, status: int, times: int) -> None:
        self.stack.platform.fail_next_sends(status, times)


@contextmanager
def _web(tmp_path: Path) -> Iterator[PlatformDriver]:
    yield WebDriver(tmp_path)


@contextmanager
def _discord(tmp_path: Path) -> Iterator[PlatformDriver]:
    with fake_world(tmp_path) as world:
        yield DiscordDriver(world, tmp_path)


@contextmanager
def _telegram(tmp_path: Path) -> Iterator[PlatformDriver]:
    with telegram_world(tmp_path) as world:
        yield TelegramDriver(world, tmp_path)


@contextmanager
def _slack(tmp_path: Path) -> Iterator[PlatformDriver]:
    with slack_world(tmp_path) as world:
        yield SlackDriver(world, tmp_path)


@contextmanager
def _whatsapp(tmp_path: Path) -> Iterator[PlatformDriver]:
    with whatsapp_world(tmp_path) as world:
        yield WhatsAppDriver(world, tmp_path)


@contextmanager
def _console(tmp_path: Path) -> Iterator[PlatformDriver]:
    yield ConsoleDriver(tmp_path)


# Every platform the contract test runs: name -> a context manager giving its driver.
DRIVERS: dict[str, Callable[[Path], Any]] = {
    "discord": _discord,
    "telegram": _telegram,
    "whatsapp": _whatsapp,
    "slack": _slack,
    "web": _web,
    "console": _console,
}

# Every platform's driver class, for what it has (``CAPABILITIES``) before one is made.
DRIVER_TYPES: dict[str, type[PlatformDriver]] = {
    "discord": DiscordDriver,
    "telegram": TelegramDriver,
    "whatsapp": WhatsAppDriver,
    "slack": SlackDriver,
    "web": WebDriver,
    "console": ConsoleDriver,
}


def drivers_with(*capabilities: str) -> list[str]:
    """The names of the platforms that have every one of ``capabilities``, sorted."""
    unknown = set(capabilities) - set(CAPABILITIES)
    if unknown:
        raise ValueError(f"no such capability: {sorted(unknown)}")
    return sorted(
        name
        for name, kind in DRIVER_TYPES.items()
        if all(getattr(kind, capability) for capability in capabilities)
    )

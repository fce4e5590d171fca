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
cannot; ``sends_files``: a user can send a file with a message, which the console and the
web chat cannot): a case of the script that needs what a platform lacks is not collected
for it (``drivers_with``), rather than skipped at run time. The console (one user at a
terminal, no server) has no strangers and no faults.

Threads are named by the driver's own string (``str`` of a Discord channel id, a Telegram
``tg:`` thread id, a WhatsApp ``wa:`` chat, a Slack ``sl:`` thread id, a web chat ``web:``
thread); ``running()`` may be entered again on the same log: a restart. The drivers of the
platforms with a chat server are here; the console's and the web chat's in
``testkit/local_drivers.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, Protocol

from threadspindle.runtime.core.actions import Action
from threadspindle.runtime.core.model import ThreadState
from threadspindle.testkit.fake_agent import FakeAgentWorld
from threadspindle.testkit.fake_discord.harness import World, fake_world
from threadspindle.testkit.fake_discord.stack import Stack, discord_stack, is_footer_text
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
from threadspindle.testkit.local_drivers import ConsoleDriver, WebDriver, typed_controls

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
CAPABILITIES = ("has_strangers", "injects_faults", "opens_threads", "sends_files")


class PlatformDriver(Protocol):
    """What the contract script needs of a platform (see the module docstring)."""

    name: str
    has_strangers: bool  # someone not allowed can write where the bot reads
    injects_faults: bool  # the platform's sends can be made to fail (``fail_next_sends``)
    opens_threads: bool  # /fork and /btw can open a new thread (a WhatsApp chat cannot)
    sends_files: bool  # a user can send a file with a message (the console cannot)

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

    def send_file(self, thread: str, name: str, data: bytes, mime: str, caption: str) -> None:
        """An allowed user's message in ``thread``: a file and its caption (the text)."""
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
    sends_files = True

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

    def send_file(self, thread: str, name: str, data: bytes, mime: str, caption: str) -> None:
        self.world.fake.send_message(
            int(thread), self.world.alice, caption, attachments=((name, data, mime),)
        )

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
    sends_files = True

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

    def send_file(self, thread: str, name: str, data: bytes, mime: str, caption: str) -> None:
        chat, topic = self.world.where(thread)
        self.world.fake.send_file(
            chat,
            self.world.alice,
            data,
            caption=caption,
            topic=topic,
            file_name=name,
            mime_type=mime,
        )

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
    sends_files = True

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

    def send_file(self, thread: str, name: str, data: bytes, mime: str, caption: str) -> None:
        self.world.fake.file(self.world.chat(thread), data, mime, filename=name, caption=caption)

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
    sends_files = True

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

    def send_file(self, thread: str, name: str, data: bytes, mime: str, caption: str) -> None:
        channel, thread_ts = self.world.where(thread)
        self.world.fake.send_message(
            channel, self.world.alice, caption, thread_ts=thread_ts, files=((name, data, mime),)
        )

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

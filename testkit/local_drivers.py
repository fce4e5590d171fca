"""Drivers of the chat surfaces Spindle serves itself, for the platform contract
(``testkit/platform_driver.py`` says what a driver is): the console (one user at a terminal,
``ConsoleDriver``) and the web chat (Spindle's own HTTP server and page, ``WebDriver``).
No platform's chat server stands behind either."""

from __future__ import annotations

import io
import math
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from threadspindle.effects.console_markup import render_controls
from threadspindle.effects.console_platform import CONSOLE_LIMITS, ConsoleMessage, ConsolePlatform
from threadspindle.effects.web_platform import WEB_LIMITS
from threadspindle.ingress.console import ConsoleChat, open_console, thread_id_for
from threadspindle.runtime.core.actions import Action
from threadspindle.runtime.core.model import Policy, ThreadState
from threadspindle.runtime.live.log import EventLog
from threadspindle.testkit.fake_agent import FakeAgentWorld
from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_discord.stack import SCRIPT, is_footer_text
from threadspindle.testkit.web_stack import WebStack, web_stack

__all__ = ["ConsoleDriver", "WebDriver", "typed_controls"]

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
    sends_files = False  # no way to send one

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

    def send_file(self, thread: str, name: str, data: bytes, mime: str, caption: str) -> None:
        raise AssertionError(f"{self.name} takes no files (sends_files is False)")

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
    sends_files = False  # no way to send one

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

    def send_file(self, thread: str, name: str, data: bytes, mime: str, caption: str) -> None:
        raise AssertionError(f"{self.name} takes no files (sends_files is False)")

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

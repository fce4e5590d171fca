"""``ConsolePlatform``: the chat platform of a terminal (``spindle run`` without a token).

Two faces, chosen by whether the output is a terminal:

- **rich** (a TTY): messages render as markdown (code blocks highlighted, ``-# `` subtext
  dimmed, buttons and menus as the commands to type) in a ``rich.live.Live`` area holding the
  last few messages, so an edit re-renders in place; older messages scroll up for good and
  a later edit of one is printed again, marked ``✎``.
- **plain** (a pipe, a file, a test's StringIO): whole lines are only ever appended, so
  the output reads like a transcript and is deterministic. A message prints as its lines;
  an edit that extends the last message prints just the new lines (streamed text reads as
  it streams); any other edit prints the whole new text on a line starting with ``✎ ``; a
  deletion prints ``✗ removed: <first line>``; controls print on a line of their own as the
  commands that answer them (``→ Accept: /allow <id>  ·  Deny: /deny <id>``); typing prints
  nothing. Subtext and mentions are shown as a terminal can (``effects.console_markup``;
  subtext dimmed when ``color``, by default when the output is a terminal). Its
  ``streams_append_only``
  tells the stream renderer to keep streamed text growing by whole lines (no temporary
  fence closers, no rewritten links, no half-written line).

Both keep the messages in ``messages`` (id -> text), for edits and tests: the latest
``KEPT_MESSAGES`` of them, up to ``KEPT_CHARS`` of text in all (a flooding agent made the
process grow by 100 MB a minute). A message no longer kept was printed long ago: an edit
of it fails as one of a message deleted on a chat platform does.
What reaches the terminal has its escape sequences and control characters removed
(``effects.terminal_text``): agent text must not drive the user's terminal.

Message ids carry a prefix of their own per run (``id_prefix``; ``spindle run`` makes one):
the log keeps them, and a later run edits what an earlier one printed (a permission
prompt closed after a restart). Such an edit prints the new text as a ``✎`` line; a
deletion of one does nothing.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

import trio
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markdown import Markdown
from rich.text import Text

from threadspindle.effects.console_markup import render_controls, render_line, render_text
from threadspindle.effects.platform import PlatformError, PlatformLimits, SelectMenu
from threadspindle.effects.terminal_text import terminal_safe
from threadspindle.runtime.core.effect_types import Button

__all__ = ["CONSOLE_LIMITS", "ConsoleMessage", "ConsolePlatform"]

CONSOLE_LIMITS = PlatformLimits(
    char_limit=100_000,
    split_margin=0,
    supports_edit=True,
    min_edit_interval_s=0.1,
    typing_refresh_s=8.0,
    renames_per_window=1000,  # a terminal has no rename limit: each title is one line
    rename_window_s=1.0,
)
LIVE_MESSAGES = 4  # messages kept in the rich live area, where edits re-render in place
KEPT_MESSAGES = 500
KEPT_CHARS = 4_000_000


@dataclass
class ConsoleMessage:
    id: str
    channel_id: str
    text: str
    buttons: tuple[Button, ...] = ()
    menu: SelectMenu | None = None
    prefix: str = ""  # "↳ " for a command reply
    deleted: bool = False
    newline_added: bool = False  # plain: its last print ended with a newline of ours


def _controls(buttons: tuple[Button, ...], menu: SelectMenu | None) -> str:
    parts = [f"[{button.label}]" for button in buttons]
    if menu is not None:
        parts.append("{" + " | ".join(menu.options) + "}")
    return " ".join(parts)


class ConsolePlatform:
    """A ``ChatPlatform`` writing to ``out`` (stdout by default); see the module docstring."""

    def __init__(
        self,
        out: TextIO | None = None,
        *,
        rich: bool | None = None,
        limits: PlatformLimits = CONSOLE_LIMITS,
        label_channels: bool = False,
        channel_name: Callable[[str], str] = str,
        console: Console | None = None,
        color: bool | None = None,
        id_prefix: str = "c",
    ) -> None:
        self.out = out if out is not None else sys.stdout
        self.rich = self.out.isatty() if rich is None else rich
        # plain: dim the subtext with an escape sequence (a terminal, not a pipe or a file)
        self.color = (not self.rich and self.out.isatty()) if color is None else color
        self.limits = limits
        self.streams_append_only = not self.rich
        self.label_channels = label_channels
        self.channel_name = channel_name  # a channel as its label shows it
        self.messages: dict[str, ConsoleMessage] = {}
        self._kept_chars = 0  # the text of ``messages``, in characters
        self.typing_calls = 0
        self.titles: dict[str, str] = {}  # channel -> the agent's title, as last shown
        self._ids = itertools.count(1)
        # Message ids are ``<id_prefix><n>``. The log keeps them, and the next run of the
        # console edits them (a prompt dismissed after a restart): with a prefix of its own
        # per run (``spindle run`` gives one), an id of an earlier run is never this run's
        # message of the same number, and is told apart (``_earlier``).
        self.id_prefix = id_prefix
        # plain: the message printed last (its text may still grow), and whether the
        # newline after it was added by us rather than being part of its text
        self._cursor: str | None = None
        self._added_newline = False
        # rich
        self._console = console or (Console(file=self.out) if self.rich else None)
        self._live: Live | None = None
        self._live_ids: list[str] = []
        self._typing = False

    # -- ChatPlatform ------------------------------------------------------------------------

    async def send(
        self,
        channel_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] = (),
        menu: SelectMenu | None = None,
        nonce: str | None = None,
    ) -> str:
        await trio.lowlevel.checkpoint()
        return self._add(ConsoleMessage(self._new_id(), channel_id, text, buttons, menu))

    async def send_file(
        self, channel_id: str, filename: str, data: bytes, caption: str
    ) -> str | None:
        """A terminal takes no file attachments: the text is shown instead."""
        await trio.lowlevel.checkpoint()
        return None

    async def reply(
        self,
        channel_id: str,
        action_id: str,
        text: str,
        *,
        ephemeral: bool = False,
        buttons: tuple[Button, ...] = (),
    ) -> str:
        await trio.lowlevel.checkpoint()
        prefix = "↳ " + ("(only you) " if ephemeral else "")
        return self._add(ConsoleMessage(self._new_id(), channel_id, text, buttons, prefix=prefix))

    async def edit(
        self,
        channel_id: str,
        message_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] | None = None,
    ) -> None:
        await trio.lowlevel.checkpoint()
        if self._earlier(message_id):
            # Printed by an earlier run, long scrolled away: the new text is printed as
            # any edit of a message no longer in view is (it was an error and a warning
            # in the chat, twice, and the user never saw the prompt closed).
            self.messages[message_id] = ConsoleMessage(message_id, channel_id, "")
        message = self._get(message_id)
        old_text, old_controls = message.text, _controls(message.buttons, message.menu)
        message.text = text
        self._kept_chars += len(text) - len(old_text)
        if buttons is not None:
            message.buttons = buttons
            if not buttons:
                message.menu = None  # an edit that clears the buttons clears every control
        if self.rich:
            self._rich_edit(message)
        else:
            self._plain_edit(message, old_text, old_controls)

    async def delete(self, channel_id: str, message_id: str) -> None:
        await trio.lowlevel.checkpoint()
        if self._earlier(message_id):
            return  # printed by an earlier run: nothing on this terminal to take back
        message = self._get(message_id)
        message.deleted = True
        if self.rich:
            self._rich_delete(message)
        else:
            first = render_line(terminal_safe(message.text.strip().split("\n", 1)[0][:60]))
            self._plain_print(f"✗ removed: {first}")
            self._cursor = None

    async def typing(self, channel_id: str) -> None:
        await trio.lowlevel.checkpoint()
        self.typing_calls += 1
        if self.rich:
            self._typing = True
            self._rich_refresh()

    async def rename_thread(self, channel_id: str, title: str) -> None:
        """A terminal thread has no name to change: say it as a line of its own."""
        await trio.lowlevel.checkpoint()
        self.titles[channel_id] = title
        label = f"{self.channel_name(channel_id)}: " if self.label_channels else ""
        self.note(f"✎ {label}thread title: {title}")

    def note(self, text: str) -> None:
        """Print a line of the console's own (help, a prompt label, a log line) above the
        live area (rich) or between messages (plain), without disturbing either."""
        if self.rich:
            self._live_print(Text(terminal_safe(text)))
        else:
            self._plain_print(terminal_safe(text))
            self._cursor = None

    def close(self) -> None:
        """End the live area (rich: its messages stay printed; a later edit of one prints
        it again) or the last line (plain). The platform stays usable: call it before
        writing anything else to the terminal."""
        if self.rich:
            if self._live is not None:
                self._typing = False
                self._rich_refresh()
                self._live.stop()
                self._live = None
                self._live_ids = []
        self._cursor = None

    # -- shared ------------------------------------------------------------------------------

    def _new_id(self) -> str:
        return f"{self.id_prefix}{next(self._ids)}"

    def _earlier(self, message_id: str) -> bool:
        """Whether ``message_id`` is an earlier run's (not this run's, nor known here)."""
        return message_id not in self.messages and not message_id.startswith(self.id_prefix)

    def _get(self, message_id: str) -> ConsoleMessage:
        message = self.messages.get(message_id)
        if message is None or message.deleted:
            raise PlatformError(f"unknown message {message_id}")
        return message

    def _add(self, message: ConsoleMessage) -> str:
        if not message.text.strip():
            raise PlatformError("cannot send an empty message")
        self.messages[message.id] = message
        self._kept_chars += len(message.text)
        if self.rich:
            self._rich_add(message)
        else:
            self._plain_add(message)
        self._forget_old()
        return message.id

    def _forget_old(self) -> None:
        """Drop the oldest messages past ``KEPT_MESSAGES`` or ``KEPT_CHARS``, but for the
        ones still being shown (the live area, the line the plain output may extend)."""
        messages = self.messages
        while len(messages) > KEPT_MESSAGES or self._kept_chars > KEPT_CHARS:
            oldest = next(
                (m for m in messages if m != self._cursor and m not in self._live_ids), None
            )
            if oldest is None:
                return
            self._kept_chars -= len(messages.pop(oldest).text)

    def _label(self, message: ConsoleMessage) -> str:
        return f"[{self.channel_name(message.channel_id)}] " if self.label_channels else ""

    # -- plain: append-only text ----------------------------------------------------------

    def _plain_print(self, text: str) -> None:
        """Write ``text`` as whole lines: a newline is added when it lacks one. Every caller
        hands it text already made safe (``terminal_safe``) before the console's own
        markup (``_shown``'s dimming) was added, so that markup survives and nothing an
        agent wrote reaches the terminal raw."""
        self._added_newline = not text.endswith("\n")
        self.out.write(text + ("\n" if self._added_newline else ""))
        self.out.flush()

    def _shown(self, text: str) -> str:
        return render_text(terminal_safe(text), color=self.color)

    def _safe_label(self, message: ConsoleMessage) -> str:
        return terminal_safe(self._label(message) + message.prefix)

    def _plain_add(self, message: ConsoleMessage) -> None:
        self._plain_print(self._safe_label(message) + self._shown(message.text))
        message.newline_added = self._added_newline
        self._plain_controls(message)

    def _plain_controls(self, message: ConsoleMessage) -> None:
        controls = terminal_safe(render_controls(message.buttons, message.menu))
        if controls:
            self._plain_print(controls)
            self._cursor = None  # the controls line ends it: nothing continues it
        else:
            self._cursor = message.id

    def _plain_edit(self, message: ConsoleMessage, old_text: str, old_controls: str) -> None:
        controls = _controls(message.buttons, message.menu)
        if message.text == old_text and controls == old_controls:
            return
        last = self._cursor == message.id  # nothing was printed after it
        if (
            message.text.startswith(old_text)
            and controls == old_controls
            and (last or (self.label_channels and not controls))
        ):
            # What is printed always starts a line: render the new lines alone. After
            # another thread's lines (labels on), each new line says whose it is: printed
            # again whole at each edit, two streams side by side grew the output as the
            # square of their length.
            suffix = message.text[len(old_text) :]
            if message.newline_added:
                if not suffix.startswith("\n"):
                    suffix = ""  # (a change within its last line: printed whole below)
                elif suffix == "\n":
                    # The newline printed after the old text was this one.
                    message.newline_added = False
                    return
                else:
                    suffix = suffix[1:]
            if suffix:
                shown = self._shown(suffix)
                if not last:
                    label = terminal_safe(self._label(message))
                    shown = "\n".join(label + ln if ln else ln for ln in shown.split("\n"))
                self._plain_print(shown)
                message.newline_added = self._added_newline
                self._cursor = message.id
                return
        self._plain_print("✎ " + self._safe_label(message) + self._shown(message.text))
        message.newline_added = self._added_newline
        self._plain_controls(message)

    # -- rich: a live area of the last messages ----------------------------------------------

    def _renderable(self, message: ConsoleMessage) -> RenderableType:
        parts: list[RenderableType] = []
        block: list[str] = []

        def flush_markdown() -> None:
            if block:
                parts.append(Markdown("\n".join(block)))
                block.clear()

        text = terminal_safe(self._label(message) + message.prefix + message.text)
        for line in text.split("\n"):
            if line.startswith("-# "):
                flush_markdown()
                parts.append(Text(render_line(line), style="dim"))
            else:
                block.append(render_line(line))
        flush_markdown()
        controls = terminal_safe(render_controls(message.buttons, message.menu))
        if controls:
            parts.append(Text(controls, style="bold cyan"))
        return Group(*parts)

    def _rich_refresh(self) -> None:
        assert self._console is not None
        items: list[RenderableType] = [
            self._renderable(self.messages[mid])
            for mid in self._live_ids
            if not self.messages[mid].deleted
        ]
        if self._typing:
            items.append(Text("⋯ working", style="dim italic"))
        if self._live is None:
            self._live = Live(
                Group(*items), console=self._console, auto_refresh=False, transient=False
            )
            self._live.start()
        else:
            self._live.update(Group(*items))
        self._live.refresh()

    def _rich_add(self, message: ConsoleMessage) -> None:
        self._typing = False  # a post ends the typing indicator, as on Discord
        self._live_ids.append(message.id)
        while len(self._live_ids) > LIVE_MESSAGES:
            settled = self.messages[self._live_ids.pop(0)]
            if not settled.deleted and self._live is not None:
                self._live.console.print(self._renderable(settled))
        self._rich_refresh()

    def _rich_edit(self, message: ConsoleMessage) -> None:
        if message.id in self._live_ids:
            self._rich_refresh()
        else:
            assert self._console is not None
            self._live_print(Group(Text("✎", style="yellow"), self._renderable(message)))

    def _rich_delete(self, message: ConsoleMessage) -> None:
        if message.id in self._live_ids:
            self._live_ids.remove(message.id)
            self._rich_refresh()
        else:
            first = terminal_safe(message.text.strip().split("\n", 1)[0][:60])
            self._live_print(Text(f"✗ removed: {first}", style="dim"))

    def _live_print(self, renderable: RenderableType) -> None:
        assert self._console is not None
        if self._live is not None:
            self._live.console.print(renderable)
        else:
            self._console.print(renderable)

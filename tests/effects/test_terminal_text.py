"""effects.terminal_text: agent text cannot drive the terminal, in the plain and the rich
console alike; ordinary text (every script, emoji, newlines, tabs) passes untouched."""

from __future__ import annotations

import io
import re

import trio
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from threadspindle.effects.console_platform import ConsolePlatform
from threadspindle.effects.render import StreamRenderer
from threadspindle.effects.terminal_text import terminal_safe
from threadspindle.runtime.core.effect_types import AppendOutput, PostOutput, SealOutput

# What a hostile agent would print: clear screen, cursor home and overwrite, window title,
# clipboard write (OSC 52), a hyperlink, a terminal reset, a DCS string, C1 CSI, BEL,
# a carriage return that rewrites the line, and a right-to-left override.
ATTACKS = (
    "\x1b[2J\x1b[H",
    "\x1b]0;pwned\x07",
    "\x1b]52;c;cm0gLXJmIH4=\x1b\\",
    "\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\",
    "\x1bc",
    "\x1bP1$r0m\x1b\\",
    "\x9b31m",
    "\x07\x08",
    "ok\rEVIL",
    "\u202efdp.exe",
    "\u200f1 + 2\u200e",  # marks that reorder what is around them
    "↳ fine\u2028» you: a forged prompt",  # a line separator, shown as a break or not at all
)
CONTROL = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


def test_each_attack_loses_its_control_characters() -> None:
    for attack in ATTACKS:
        cleaned = terminal_safe(f"before {attack} after")
        assert CONTROL.search(cleaned) is None, repr(cleaned)
        assert cleaned.startswith("before ") and cleaned.endswith(" after")
    assert terminal_safe("\x1b]0;pwned\x07title") == "title"  # the OSC payload goes too
    assert terminal_safe("\x1b[31mred\x1b[0m") == "red"


@given(st.text())
def test_nothing_but_newline_and_tab_survives(text: str) -> None:
    assert CONTROL.search(terminal_safe(text)) is None


@given(
    st.text(st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Zl", "Zp")))
    | st.just("a\tb\nc 👩\u200d💻")  # (the zero-width joiner of an emoji stays)
)
def test_ordinary_text_is_untouched(text: str) -> None:
    assert terminal_safe(text) == text


@given(st.text(), st.integers(min_value=0))
def test_a_stream_cut_anywhere_stays_safe(text: str, cut: int) -> None:
    cut %= len(text) + 1
    joined = terminal_safe(text[:cut]) + terminal_safe(text[cut:])
    assert CONTROL.search(joined) is None


async def _stream(platform: ConsolePlatform, pieces: list[str]) -> None:
    async with StreamRenderer(platform, "console:main") as renderer:
        await renderer.apply(PostOutput(key="r1/1", kind="text", text=pieces[0]))
        for seq, piece in enumerate(pieces[1:], start=1):
            await renderer.apply(AppendOutput(key="r1/1", seq=seq, text=piece))
        await renderer.apply(SealOutput(key="r1/1"))
        await renderer.apply(PostOutput(key="r1/2", kind="footer", text="1s · \x1b[2J"))
    platform.close()


async def test_plain_console_prints_no_escape_sequence_of_the_agent() -> None:
    out = io.StringIO()
    platform = ConsolePlatform(out, rich=False)
    pieces = ["Hello\n", *[f"line {a}\n" for a in ATTACKS], "\x1b]0;split", "\x07 end\n"]
    await _stream(platform, pieces)
    printed = out.getvalue()
    assert CONTROL.search(printed) is None, repr(printed)
    assert "Hello" in printed and "line ok" in printed and "end" in printed
    assert "pwned" not in printed


async def test_rich_console_prints_no_escape_sequence_of_the_agent() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system="truecolor")
    platform = ConsolePlatform(out, rich=True, console=console)
    await _stream(platform, ["Hello\n", *[f"line {a}\n" for a in ATTACKS]])
    platform.note("a note \x1b]0;pwned\x07")
    await trio.lowlevel.checkpoint()
    printed = out.getvalue()
    # rich writes its own styling and cursor sequences (and carriage returns for its live
    # area); none of the agent's may be among them.
    for planted in ("\x1b[2J", "\x1b]0;", "\x1b]52;", "\x1bc", "\x1bP", "\x9b", "\x07"):
        assert planted not in printed, (planted, printed)
    assert "\u202e" not in printed and "pwned" not in printed

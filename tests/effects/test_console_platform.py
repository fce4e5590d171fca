"""effects.console_platform: plain (pipe) output is an append-only, deterministic transcript;
rich (TTY) output re-renders edits in a live area."""

from __future__ import annotations

import io
import os

import trio
from rich.console import Console

from threadspindle.effects.chunking import question_menu_id
from threadspindle.effects.console_platform import (
    KEPT_CHARS,
    KEPT_MESSAGES,
    LIVE_MESSAGES,
    ConsolePlatform,
)
from threadspindle.effects.platform import PlatformError, SelectMenu
from threadspindle.effects.render import StreamRenderer
from threadspindle.runtime.core.effect_types import (
    AppendOutput,
    Button,
    DismissPrompt,
    EditOutput,
    PostOutput,
    ReplyToCommand,
    SealOutput,
    ShowPermissionPrompt,
    Typing,
)

ANSWER = "Here are the files, see https://x.io\n```python\nprint(1)\nprint(2)\n```\nDone."


async def play_a_run(platform: ConsolePlatform) -> StreamRenderer:
    """One run as the core would emit it: marker, thinking, a tool card, streamed text,
    a permission prompt answered, a footer."""
    async with StreamRenderer(platform, "console:main") as renderer:
        await renderer.apply(Typing(on=True))
        await renderer.apply(PostOutput(key="r1/0", kind="marker", text="» you: list files"))
        await renderer.apply(PostOutput(key="r1/1", kind="thinking", text="Let me look"))
        await renderer.apply(AppendOutput(key="r1/1", seq=1, text=" at the dir"))
        await renderer.apply(SealOutput(key="r1/1"))
        await renderer.apply(PostOutput(key="r1/2", kind="tool", text="Bash(ls)"))
        await trio.sleep(0.3)
        await renderer.apply(EditOutput(key="r1/2", text="Bash(ls)\n→ a.py\nb.py"))
        await renderer.apply(PostOutput(key="r1/3", kind="text", text=ANSWER[:5]))
        for seq, start in enumerate(range(5, len(ANSWER), 5), start=1):
            await trio.sleep(0.04)
            await renderer.apply(AppendOutput(key="r1/3", seq=seq, text=ANSWER[start : start + 5]))
        await renderer.apply(SealOutput(key="r1/3"))
        prompt = ShowPermissionPrompt(key="r1/4", request_id="p1", tool="Write", detail="a.txt")
        await renderer.apply(prompt)
        await renderer.apply(DismissPrompt(key="r1/4", request_id="p1", outcome="Answered: allow"))
        await renderer.apply(PostOutput(key="r1/5", kind="footer", text="3s · $0.0100 · sonnet"))
        await renderer.apply(Typing(on=False))
    platform.close()
    return renderer


PLAIN_TRANSCRIPT = """\
» you: list files
💭 Let me look at the dir
🔧 `Bash(ls)`
```
a.py
b.py
```
Here are the files, see https://x.io
```python
print(1)
print(2)
```
Done.
🔐 **Permission needed:** `Write`
`a.txt`
→ Accept: /allow p1  ·  Deny: /deny p1
✎ 🔐 **Permission needed:** `Write`
`a.txt`
Answered: allow
3s · $0.0100 · sonnet
"""


async def test_plain_output_is_an_append_only_transcript(autojump_clock: object) -> None:
    out = io.StringIO()
    platform = ConsolePlatform(out)  # a StringIO is no TTY: plain
    assert not platform.rich and platform.streams_append_only
    renderer = await play_a_run(platform)
    assert out.getvalue() == PLAIN_TRANSCRIPT
    # Streamed text was printed as it grew, line by line (edits), never repeated.
    assert renderer.statistics().edits >= 3
    assert out.getvalue().count("print(1)") == 1
    assert platform.typing_calls >= 1


async def test_plain_output_through_a_pipe(autojump_clock: object) -> None:
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w", encoding="utf-8") as pipe:
        platform = ConsolePlatform(pipe)
        assert not platform.rich
        await play_a_run(platform)
    with os.fdopen(read_end, encoding="utf-8") as reader:
        assert reader.read() == PLAIN_TRANSCRIPT


async def test_plain_edits_deletes_replies_and_channel_labels() -> None:
    out = io.StringIO()
    platform = ConsolePlatform(out, label_channels=True)
    first = await platform.send("console:a", "first line")
    await platform.edit("console:a", first, "first line\nsecond line")  # new lines: appended
    await platform.edit("console:a", first, "first line\nsecond line, grown")  # mid-line: ✎
    second = await platform.send("console:b", "second")
    await platform.edit("console:a", first, "first line\nsecond line, grown")  # unchanged
    await platform.edit("console:a", first, "rewritten")
    platform.note("(console) type /help for commands")
    await platform.reply("console:b", "act1", "Queued (position 2)", ephemeral=True)
    await platform.delete("console:b", second)
    platform.close()
    assert out.getvalue() == (
        "[console:a] first line\n"
        "second line\n"
        "✎ [console:a] first line\nsecond line, grown\n"
        "[console:b] second\n"
        "✎ [console:a] rewritten\n"
        "(console) type /help for commands\n"
        "[console:b] ↳ (only you) Queued (position 2)\n"
        "✗ removed: second\n"
    )
    assert platform.messages[second].deleted


async def test_rich_output_renders_markdown_and_re_renders_edits_in_place(
    autojump_clock: object,
) -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80, color_system=None)
    platform = ConsolePlatform(out, rich=True, console=console)
    assert not platform.streams_append_only
    renderer = await play_a_run(platform)
    screen = out.getvalue()
    # Markdown was rendered: no fences or bold markers, code and subtext shown as text.
    assert "```" not in screen and "**" not in screen
    for shown in ("print(1)", "🔧 `Bash(ls)`", "Answered: allow", "3s · $0.0100 · sonnet"):
        assert shown in screen
    # A live run re-renders: edits of messages still in the live area print no ✎.
    assert "✎" not in screen
    assert renderer.statistics().edits >= 5


async def test_rich_edit_of_a_message_that_scrolled_away_is_printed_again() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=60, color_system=None)
    platform = ConsolePlatform(out, rich=True, console=console)
    old = await platform.send("c", "old message")
    for n in range(LIVE_MESSAGES):
        await platform.send("c", f"message {n}")
    await platform.edit("c", old, "old message, corrected")
    platform.note("a note of the console")
    await platform.send("c", "ok", buttons=())
    platform.close()
    screen = out.getvalue()
    assert "✎" in screen and "old message, corrected" in screen
    assert "a note of the console" in screen


async def test_rich_reply_and_typing() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=60, color_system=None)
    platform = ConsolePlatform(out, rich=True, console=console)
    await platform.typing("c")
    assert "working" in out.getvalue()
    renderer = StreamRenderer(platform, "c")
    posted = await renderer.apply(ReplyToCommand(key="c/reply/a", action_id="a", text="Done"))
    platform.close()
    assert posted == [("c/reply/a", ("c1",))]
    assert "↳ Done" in out.getvalue()


async def test_plain_output_shows_discord_markup_as_a_terminal_can() -> None:
    out = io.StringIO()
    platform = ConsolePlatform(out, color=True)  # as on a terminal: subtext dimmed
    await platform.send("c", "-# 🔧 `Bash(ls)`\nasked by <@you> in <#42>, role <@&7>")
    menu = SelectMenu(custom_id=question_menu_id("q1"), options=("Red", "Blue"))
    await platform.send("c", "❓ **Question:** Which?", menu=menu)
    remove = Button(label="Remove from queue", action="remove_queued:a1")
    await platform.send("c", "Queued (position 1).", buttons=(remove,))
    assert out.getvalue() == (
        "\x1b[2m🔧 `Bash(ls)`\x1b[22m\n"
        "asked by @you in #42, role @7\n"
        "❓ **Question:** Which?\n"
        "→ /answer q1 <Red | Blue>\n"
        "Queued (position 1).\n"
        "→ Remove from queue: /remove a1\n"  # the console types what Discord clicks
    )
    # What the platform keeps is the message as sent: the console ingress and the edits
    # compare against it.
    assert platform.messages["c1"].text.startswith("-# 🔧")


async def test_the_console_dims_subtext_but_strips_what_the_agent_wrote() -> None:
    """Sanitizing comes before the console's own markup: the dimming survives, an escape
    sequence from the agent does not."""
    out = io.StringIO()
    platform = ConsolePlatform(out, color=True)
    await platform.send("c", "-# thinking \x1b[31mred\x1b]0;title\x07\nplain \x1b[2J")
    assert out.getvalue() == "\x1b[2mthinking red\x1b[22m\nplain \n"


async def test_a_queued_prompts_remove_button_shows_as_the_command_to_type() -> None:
    out = io.StringIO()
    platform = ConsolePlatform(out)
    remove = Button(label="Remove from queue", action="remove_queued:item7")
    other = Button(label="Later", action="something:else")
    await platform.reply("console:a", "act1", "Queued (position 1).", buttons=(remove,))
    await platform.send("console:a", "no command for this", buttons=(other,))
    assert out.getvalue() == (
        "↳ Queued (position 1).\n→ Remove from queue: /remove item7\nno command for this\n[Later]\n"
    )


async def test_only_the_latest_messages_are_kept_in_number_and_in_size() -> None:
    # A flooding agent: the transcript is printed whole, but memory holds only the latest.
    out = io.StringIO()
    platform = ConsolePlatform(out, rich=False)
    ids = [await platform.send("t1", f"line {i}") for i in range(KEPT_MESSAGES + 100)]
    assert list(platform.messages) == ids[100:]
    assert "line 0\n" in out.getvalue()  # (printed all the same)
    try:
        await platform.edit("t1", ids[0], "too late")
    except PlatformError:
        pass
    else:
        raise AssertionError("an edit of a message no longer kept must fail")
    await platform.edit("t1", ids[-1], "line last, edited")  # the latest still edit
    big = "x" * (KEPT_CHARS // 3)
    for _ in range(5):
        await platform.send("t1", big)
    assert sum(len(m.text) for m in platform.messages.values()) <= KEPT_CHARS
    assert len(platform.messages) == 3  # the latest three big ones; the short ones went first


async def test_two_threads_streaming_at_once_print_each_new_line_once_with_its_thread() -> None:
    # Printed again whole at each edit, two streams side by side grew the output as the
    # square of their length, and nothing said which thread a line was from.
    out = io.StringIO()
    platform = ConsolePlatform(
        out, label_channels=True, channel_name=lambda c: c.removeprefix("console:")
    )
    a = await platform.send("console:main", "a1")
    b = await platform.send("console:side", "b1")
    text_a, text_b = "a1", "b1"
    for i in range(2, 5):
        text_a += f"\na{i}"
        await platform.edit("console:main", a, text_a)
        text_b += f"\nb{i}"
        await platform.edit("console:side", b, text_b)
    # Right after its own line, as a message's lines are, without its label again.
    await platform.edit("console:side", b, text_b + "\nb5\n")
    await platform.edit("console:main", a, "rewritten")  # not a continuation: printed whole
    assert out.getvalue() == (
        "[main] a1\n[side] b1\n"
        "[main] a2\n[side] b2\n[main] a3\n[side] b3\n[main] a4\n[side] b4\n"
        "b5\n"
        "✎ [main] rewritten\n"
    )


def test_an_earlier_runs_message_is_edited_as_a_new_line_and_never_this_runs_own():
    # The log keeps message ids, and the next run edits them (a prompt closed after a
    # restart). Ids were c1, c2 ... in every run: an earlier run's "c1" was unknown (an
    # error), or this run's own c1, edited in its place.
    out = io.StringIO()
    platform = ConsolePlatform(out, rich=False, id_prefix="cB-")

    async def main() -> None:
        mine = await platform.send("ch", "this run's first message")
        assert mine == "cB-1"
        await platform.edit("ch", "cA-1", "🔐 Request\nExpired: the run ended.")
        await platform.edit("ch", "c1", "from a run before ids had a prefix")
        await platform.delete("ch", "cA-2")  # nothing of it on this terminal: quietly done
        try:
            await platform.edit("ch", "cB-99", "x")
        except PlatformError:
            pass
        else:
            raise AssertionError("this run's unknown id must stay an error")

    trio.run(main)
    text = out.getvalue()
    assert "✎ 🔐 Request\nExpired: the run ended." in text
    assert "✎ from a run before ids had a prefix" in text
    assert platform.messages["cB-1"].text == "this run's first message"

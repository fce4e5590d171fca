"""Discord markup as a terminal shows it (pure): subtext, mentions and buttons.

The renderer writes Discord's markdown for every platform. A terminal has no small grey
text, no mention pills and nothing to click, so the console shows them its own way:

- ``-# text`` (subtext: tool cards, thinking, a prompt's outcome) loses its marker and is
  dimmed when the output takes colour;
- ``<@id>``, ``<@!id>``, ``<@&id>`` and ``<#id>`` become ``@id`` and ``#id``;
- buttons and menus become the console command that does what a click would: Accept and
  Deny are ``/allow <id>`` and ``/deny <id>``, a question's options ``/answer <id> ...``,
  "Remove from queue" ``/remove <item>``; a button the console has no command for keeps
  its label, in brackets.

Only the lines' own markup is rewritten, line by line, so text streamed in pieces renders
the same as the whole. Sanitizing what an agent wrote is not this module's job.
"""

from __future__ import annotations

import re

from threadspindle.effects.chunking import parse_component_action
from threadspindle.effects.platform import SelectMenu
from threadspindle.runtime.core.effect_types import Button

__all__ = ["render_controls", "render_line", "render_text"]

SUBTEXT = "-# "
REMOVE_QUEUED = "remove_queued:"  # the core's "Remove from queue" button action
DIM, NORMAL = "\x1b[2m", "\x1b[22m"
# An agent's mention comes escaped (``\<@id>``, effects/chunking.escape_mentions): the
# console pings nobody, so it reads as any other.
_MENTION = re.compile(r"\\?<(@[!&]?|#)(\w+)>")


def render_line(line: str, *, color: bool = False) -> str:
    """One line of Discord markdown for a terminal."""
    line = _MENTION.sub(lambda m: ("#" if m.group(1) == "#" else "@") + m.group(2), line)
    if line.startswith(SUBTEXT):
        body = line[len(SUBTEXT) :]
        return f"{DIM}{body}{NORMAL}" if color and body else body
    return line


def render_text(text: str, *, color: bool = False) -> str:
    """A whole message (or the lines appended to one), line by line."""
    return "\n".join(render_line(line, color=color) for line in text.split("\n"))


def render_controls(buttons: tuple[Button, ...], menu: SelectMenu | None) -> str:
    """A message's buttons and menu as what to type instead ("" when it has none)."""
    parts: list[str] = []
    for button in buttons:
        parsed = parse_component_action(button.action)
        if parsed is not None and parsed[0] == "permission":
            command = "/allow" if parsed[2] else "/deny"
            parts.append(f"{button.label}: {command} {parsed[1]}")
        elif button.action.startswith(REMOVE_QUEUED) and button.action[len(REMOVE_QUEUED) :]:
            # The core's "Remove from queue" button: the console types it.
            parts.append(f"{button.label}: /remove {button.action[len(REMOVE_QUEUED) :]}")
        else:
            parts.append(f"[{button.label}]")
    if menu is not None:
        parsed = parse_component_action(menu.custom_id)
        choices = " | ".join(menu.options)
        if parsed is not None and parsed[0] == "question":
            parts.append(f"/answer {parsed[1]} <{choices}>")
        else:
            parts.append("{" + choices + "}")
    if not parts:
        return ""
    commands = any(not p.startswith(("[", "{")) for p in parts)
    return ("→ " if commands else "") + "  ·  ".join(parts)

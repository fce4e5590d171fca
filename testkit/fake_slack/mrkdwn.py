"""What Slack shows of a ``mrkdwn`` text, for the fake Slack: the markers gone, the three
escapes decoded, links and mentions as their labels, and the places where the text would
show something the sender did not mean (``problems``).

Slack's rules (https://api.slack.com/reference/surfaces/formatting): ``&``, ``<`` and ``>``
must be escaped as ``&amp; &lt; &gt;``; a raw ``<`` opens a control sequence
(``<@U123>``, ``<#C123>``, ``<!here>``, ``<https://…|label>``, ``<mailto:…>``) that ends
at the next ``>``. A raw ``<`` that opens none of these, or an ``&`` that starts no escape,
is a **problem**: the message would not read as written. ``*bold*``, ``_italic_``,
``~strike~`` and code spans/fences are shown without their markers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["problems", "visible"]

_CONTROL = re.compile(r"<([^<>\n]*)>")
_ENTITY = re.compile(r"&(amp|lt|gt);")
_STRAY_AMP = re.compile(r"&(?!(amp|lt|gt);)")
_EMPHASIS = re.compile(r"(?<![\w*_~`])([*_~])(?=\S)([^\n]*?\S)\1(?![\w*_~`])")
_FENCE = "```"


def _control(body: str, names: Mapping[str, str]) -> str | None:
    """The label a control sequence shows; None when it is not one Slack knows."""
    target, _, label = body.partition("|")
    if target.startswith("@") and re.fullmatch(r"@[UW][A-Z0-9]+", target):
        return "@" + (label or names.get(target[1:], target[1:]))
    if target.startswith("#") and re.fullmatch(r"#C[A-Z0-9]+", target):
        return "#" + (label or target[1:])
    if target.startswith("!"):
        return "@" + (label or target[1:])
    if re.match(r"(https?://|mailto:)\S+$", target):
        return label or target
    return None


def problems(text: str) -> list[str]:
    """What would not show as written: stray ``<``/``>`` and bare ``&``."""
    found: list[str] = []
    rest = _CONTROL.sub(lambda m: "" if _control(m.group(1), {}) is not None else m.group(0), text)
    if "<" in rest or ">" in rest:
        found.append("unescaped < or >")
    if _STRAY_AMP.search(text):
        found.append("unescaped &")
    return found


def _unescape(text: str) -> str:
    return _ENTITY.sub(lambda m: {"amp": "&", "lt": "<", "gt": ">"}[m.group(1)], text)


def _inline(line: str, names: Mapping[str, str]) -> str:
    out: list[str] = []
    for index, piece in enumerate(line.split("`")):
        if index % 2:  # inside a code span: shown as written
            out.append(piece)
            continue
        previous = None
        while previous != piece:
            previous, piece = piece, _EMPHASIS.sub(r"\2", piece)
        out.append(piece)
    shown = "".join(out) if line.count("`") % 2 == 0 else line
    shown = _CONTROL.sub(lambda m: _control(m.group(1), names) or m.group(0), shown)
    return _unescape(shown)


def visible(text: str, names: Mapping[str, str] | None = None) -> str:
    """The text as a Slack client shows it (markers gone, escapes decoded)."""
    names = names or {}
    out: list[str] = []
    in_code = False
    for line in text.split("\n"):
        if line.strip() == _FENCE or (line.startswith(_FENCE) and not in_code):
            opened = line[3:]
            in_code = not in_code if line.strip() == _FENCE else True
            if opened.strip() and line.strip() != _FENCE:
                out.append(_unescape(opened))
            continue
        if in_code:
            if line.endswith(_FENCE):
                in_code = False
                line = line[:-3]
                if not line:
                    continue
            out.append(_unescape(line))
        else:
            out.append(_inline(line, names))
    return "\n".join(out)

"""Discord-flavoured Markdown (what the renderer writes) -> WhatsApp's formatting.

WhatsApp knows ``*bold*``, ``_italic_``, ``~strike~``, `` `code` `` and fenced
```` ``` ```` blocks, ``> quotes`` and lists; nothing else. Outside code this turns
``**b**``/``__b__`` into ``*b*``, ``~~s~~`` into ``~s~``, a heading or a ``-# `` subtext
line into a bold or italic line, ``[label](url)`` into ``label (url)`` and a ``<url>``
(Discord's no-embed wrapping) into the bare url. Code (fenced or inline) is left exactly as
written. The result is never longer than the input, so the renderer's split still fits.
"""

from __future__ import annotations

import re

__all__ = ["to_whatsapp"]

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
_BOLD = re.compile(r"\*\*(.+?)\*\*|__(.+?)__")
_STRIKE = re.compile(r"~~(.+?)~~")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")
_ANGLE_URL = re.compile(r"<(https?://[^>\s]+)>")
_HEADING = re.compile(r"^#{1,6} +(.+?)\s*$")
_SUBTEXT = re.compile(r"^-# +(.+?)\s*$")


def _inline(text: str) -> str:
    """Convert one line outside a fence, leaving its inline code untouched."""
    # WhatsApp has no mentions to make inert: the renderer's escape (``\\<@``) would show,
    # in code as in prose.
    text = text.replace("\\<@", "<@")
    out: list[str] = []
    last = 0
    for match in _INLINE_CODE.finditer(text):
        out.append(_prose(text[last : match.start()]))
        out.append(match.group(0))
        last = match.end()
    out.append(_prose(text[last:]))
    return "".join(out)


def _prose(text: str) -> str:
    text = _LINK.sub(lambda m: f"{m.group(1)} ({m.group(2)})", text)
    text = _ANGLE_URL.sub(lambda m: m.group(1), text)
    text = _BOLD.sub(lambda m: f"*{m.group(1) or m.group(2)}*", text)
    return _STRIKE.sub(lambda m: f"~{m.group(1)}~", text)


def to_whatsapp(text: str) -> str:
    """``text`` in WhatsApp's formatting (see the module docstring)."""
    lines = text.split("\n")
    in_fence = False
    for index, line in enumerate(lines):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            lines[index] = line.replace("\\<@", "<@")  # the renderer's escape, shown as written
            continue
        if heading := _HEADING.match(line):
            line = f"*{heading.group(1).strip('*')}*"
        elif subtext := _SUBTEXT.match(line):
            line = f"_{subtext.group(1).strip('_')}_"
        lines[index] = _inline(line)
    return "\n".join(lines)

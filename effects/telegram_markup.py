"""Chat markdown as Telegram shows it: the renderer's text -> Telegram HTML, and back to plain.

The stream renderer writes one chat dialect (Discord markdown: fences, ``**bold**``, inline
code, ``-# `` subtext, ``<url>`` links without embeds, ``<@id>`` mentions); the console
shows it as a terminal can (``effects.console_markup``), and this module as Telegram can,
in its HTML parse mode (https://core.telegram.org/bots/api#html-style). It keeps two
promises:

- **Never rejected for markup.** Every construct becomes a balanced pair of tags from
  Telegram's set, and every other ``<``, ``>`` and ``&`` is escaped, so the output parses
  whatever the agent wrote. ``visible_text`` is what Telegram shows (its limit counts
  that, in UTF-16 code units: ``utf16_len``), and ``plain_text`` is the fallback a
  platform sends without any parse mode if Telegram refuses the HTML all the same.
- **Code stays code.** A fenced block becomes ``<pre><code class="language-x">``; a fence
  still open at the end (a message cut inside a block is closed by the renderer, but a
  streamed one may not be yet) is closed here. Inside code nothing is interpreted.

What changes: ``-# subtext`` lines become italic (Telegram has no subtext), ``# headings``
bold, ``<https://…>`` a plain link (the platform turns previews off instead), ``[text](url)``
a link, ``<@id>`` a mention of the name ``names`` knows for that id (else ``@id``; only the
core writes one: the renderer escapes the agent's as ``\\<@id>``, shown as the text ``<@id>``),
``~~x~~`` strikethrough, ``||x||`` a spoiler. Single ``*``/``_`` emphasis is left as typed:
in agent text it is far more often a glob or a snake_case name than emphasis.
Everything here is pure.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping

__all__ = ["plain_text", "to_telegram_html", "truncate_utf16", "utf16_len", "visible_text"]

FENCE = "```"

_INLINE = re.compile(
    r"(?P<code>(?P<ticks>`+)(?P<code_body>.+?)(?P=ticks))"
    r"|<(?P<url>https?://[^\s<>]+)>"
    r"|(?P<inert>\\<@)"
    r"|<@!?(?P<mention>\d+)>"
    r"|\[(?P<label>[^\]\n]+)\]\((?P<href>https?://[^\s()]+)\)"
    r"|\*\*(?P<bold>.+?)\*\*"
    r"|~~(?P<strike>.+?)~~"
    r"|\|\|(?P<spoiler>.+?)\|\|"
)
_TAG = re.compile(r"<[^>]*>")
_HEADING = re.compile(r"^(#{1,3}) +(.+)$")


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def _inline(text: str, names: Mapping[str, str]) -> str:
    """One line outside code, with its inline markup as tags, the rest escaped."""
    out: list[str] = []
    last = 0
    for match in _INLINE.finditer(text):
        out.append(_escape(text[last : match.start()]))
        last = match.end()
        if match.group("code") is not None:
            # The renderer escapes every agent mention; in code it is only text.
            body = match.group("code_body").replace("\\<@", "<@")
            out.append(f"<code>{_escape(body)}</code>")
        elif match.group("url") is not None:
            out.append(_escape(match.group("url")))
        elif match.group("inert") is not None:
            out.append("&lt;@")  # the agent's mention, escaped by the renderer: text only
        elif match.group("mention") is not None:
            user = match.group("mention")
            name = names.get(user) or f"@{user}"
            out.append(f'<a href="tg://user?id={user}">{_escape(name)}</a>')
        elif match.group("href") is not None:
            href = html.escape(match.group("href"), quote=True)
            out.append(f'<a href="{href}">{_escape(match.group("label"))}</a>')
        elif match.group("bold") is not None:
            out.append(f"<b>{_inline(match.group('bold'), names)}</b>")
        elif match.group("strike") is not None:
            out.append(f"<s>{_inline(match.group('strike'), names)}</s>")
        else:
            out.append(f"<tg-spoiler>{_inline(match.group('spoiler'), names)}</tg-spoiler>")
    out.append(_escape(text[last:]))
    return "".join(out)


def _line(line: str, names: Mapping[str, str]) -> str:
    if line.startswith("-# "):
        body = _inline(line[3:], names)
        return f"<i>{body}</i>" if body.strip() else body
    heading = _HEADING.match(line)
    if heading is not None:
        return f"<b>{_inline(heading.group(2), names)}</b>"
    return _inline(line, names)


def _code_block(language: str, lines: list[str]) -> str:
    # The renderer escapes every agent mention; in code it is only text.
    body = _escape("\n".join(lines).replace("\\<@", "<@"))
    language = re.sub(r"[^\w+#.-]", "", language)[:32]
    opening = f'<code class="language-{language}">' if language else "<code>"
    return f"<pre>{opening}{body}</code></pre>"


def to_telegram_html(text: str, names: Mapping[str, str] | None = None) -> str:
    """The text in Telegram's HTML parse mode (see the module docstring). ``names``: the
    display names of the user ids that ``<@id>`` mentions may name."""
    names = names or {}
    out: list[str] = []
    fence: str | None = None  # the language of the open fence
    code: list[str] = []
    for line in text.split("\n"):
        stripped = line.strip()
        if fence is None:
            if stripped.startswith(FENCE):
                fence, code = stripped[3:].strip("` "), []
            else:
                out.append(_line(line, names))
        elif stripped.startswith(FENCE) and not stripped.strip("`"):
            out.append(_code_block(fence, code))
            fence = None
        else:
            code.append(line)
    if fence is not None:
        out.append(_code_block(fence, code))
    return "\n".join(out)


def visible_text(telegram_html: str) -> str:
    """What Telegram shows of an HTML text: the tags gone, the entities decoded."""
    return html.unescape(_TAG.sub("", telegram_html))


def plain_text(text: str, names: Mapping[str, str] | None = None) -> str:
    """The fallback without any parse mode: what the HTML would have shown."""
    return visible_text(to_telegram_html(text, names))


def utf16_len(text: str) -> int:
    """Telegram counts its limits in UTF-16 code units (an emoji is usually two)."""
    return len(text.encode("utf-16-le")) // 2


def truncate_utf16(text: str, limit: int, marker: str = "…") -> str:
    """``text`` cut to at most ``limit`` UTF-16 units, ending in ``marker`` when cut."""
    if utf16_len(text) <= limit:
        return text
    budget = limit - utf16_len(marker)
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > budget:
            return text[:index] + marker
    return text

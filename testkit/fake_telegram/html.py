"""Telegram's HTML parse mode, parsed as strictly as the Bot API does: text with entities, or
``MarkupRefused`` with the API's own kind of message ("can't parse entities: ...").

What it accepts (https://core.telegram.org/bots/api#html-style): the tags ``b strong i em u
ins s strike del span class="tg-spoiler" tg-spoiler a href code pre blockquote tg-emoji``,
properly nested and closed; the named entities ``&lt; &gt; &amp; &quot;`` and numeric ones.
Anything else (an unknown tag, a stray ``<``, an unclosed or crossed tag) is refused, as
Telegram refuses it, so a test against the fake proves a message would not be rejected.
Offsets and lengths are in UTF-16 code units, as Telegram counts them.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["MarkupRefused", "parse_html", "utf16_len"]

_ENTITY_OF_TAG = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "tg-spoiler": "spoiler",
    "span": "spoiler",
    "a": "text_link",
    "code": "code",
    "pre": "pre",
    "blockquote": "blockquote",
    "tg-emoji": "custom_emoji",
}
_TAG = re.compile(r"<(/?)([a-z-]+)((?:\s+[a-z-]+\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s>]+))*)\s*>")
_ATTR = re.compile(r"([a-z-]+)\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s>]+))")
_ENTITY = re.compile(r"&(#\d+|#x[0-9a-fA-F]+|[a-zA-Z]+);")
_NAMED = {"lt", "gt", "amp", "quot"}


class MarkupRefused(ValueError):
    """The text would be rejected by Telegram: 400 "can't parse entities: ..."."""


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@dataclass
class _Open:
    tag: str
    entity: dict[str, Any]
    start: int  # utf-16 offset


def _decode(chunk: str, at: int) -> str:
    """Text between tags, entities decoded. The API asks every ``<``, ``>`` and ``&`` that
    is not markup to be escaped: here one that is not is refused."""
    out: list[str] = []
    last = 0
    for match in _ENTITY.finditer(chunk):
        out.append(_bare(chunk[last : match.start()], at + last))
        name = match.group(1)
        if not name.startswith("#") and name not in _NAMED:
            raise MarkupRefused(
                f"can't parse entities: unsupported HTML entity at byte offset {at + match.start()}"
            )
        out.append(html.unescape(match.group(0)))
        last = match.end()
    out.append(_bare(chunk[last:], at + last))
    return "".join(out)


def _bare(text: str, at: int) -> str:
    for mark in ("&", ">"):
        if mark in text:
            raise MarkupRefused(
                f"can't parse entities: unescaped {mark!r} at byte offset {at + text.index(mark)}"
            )
    return text


def parse_html(source: str) -> tuple[str, list[dict[str, Any]]]:
    """``(text, entities)`` of an HTML-mode message; ``MarkupRefused`` when Telegram would
    refuse it."""
    text: list[str] = []
    length = 0
    entities: list[dict[str, Any]] = []
    stack: list[_Open] = []
    position = 0
    while position < len(source):
        opening = source.find("<", position)
        chunk = source[position:] if opening < 0 else source[position:opening]
        if chunk:
            decoded = _decode(chunk, position)
            text.append(decoded)
            length += utf16_len(decoded)
        if opening < 0:
            break
        match = _TAG.match(source, opening)
        if match is None:
            raise MarkupRefused(
                f"can't parse entities: unsupported start tag at byte offset {opening}"
            )
        closing, tag, attrs = match.group(1) == "/", match.group(2), match.group(3)
        if tag not in _ENTITY_OF_TAG:
            raise MarkupRefused(f'can\'t parse entities: unsupported start tag "{tag}"')
        if closing:
            if not stack or stack[-1].tag != tag:
                raise MarkupRefused(
                    f"can't parse entities: can't find start tag corresponding to end tag \"{tag}\""
                )
            item = stack.pop()
            if length > item.start:
                entities.append(
                    {**item.entity, "offset": item.start, "length": length - item.start}
                )
        else:
            entity: dict[str, Any] = {"type": _ENTITY_OF_TAG[tag]}
            values = {
                m.group(1): m.group(2) or m.group(3) or m.group(4) for m in _ATTR.finditer(attrs)
            }
            if tag == "a":
                if not values.get("href"):
                    raise MarkupRefused("can't parse entities: a link without href")
                href = html.unescape(values["href"])
                if href.startswith("tg://user?id="):
                    entity = {
                        "type": "text_mention",
                        "user": {
                            "id": int(href.split("=", 1)[1]),
                            "is_bot": False,
                            "first_name": "user",
                        },
                    }
                else:
                    entity["url"] = href
            elif tag == "span" and values.get("class") != "tg-spoiler":
                raise MarkupRefused('can\'t parse entities: unsupported start tag "span"')
            elif tag == "code" and stack and stack[-1].tag == "pre":
                language = (values.get("class") or "").removeprefix("language-")
                if language:
                    stack[-1].entity["language"] = language
                entity = {"type": "code", "inside_pre": True}
            stack.append(_Open(tag, entity, length))
        position = match.end()
    if stack:
        raise MarkupRefused(
            "can't parse entities: can't find end tag corresponding to start tag "
            f'"{stack[-1].tag}"'
        )
    # A <code> inside <pre> is the pre's language, not an entity of its own.
    kept = [e for e in entities if not e.get("inside_pre")]
    kept.sort(key=lambda e: (e["offset"], -e["length"]))
    return "".join(text), kept

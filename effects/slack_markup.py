"""Chat markdown as Slack shows it: the renderer's text -> Slack ``mrkdwn``, and a plain
fallback (pure).

The stream renderer writes one chat dialect (Discord markdown: fences, ``**bold**``, inline
code, ``-# `` subtext, ``<url>`` links, ``<@id>`` mentions); this module writes it as Slack's
mrkdwn (https://api.slack.com/reference/surfaces/formatting). Its promises:

- **Nothing is misread.** Slack reads ``&``, ``<`` and ``>`` as the start of an escape or
  a control sequence everywhere, code included, so every one of them in the agent's text
  becomes ``&amp; &lt; &gt;``; the only raw ``<…>`` left are the links and mentions made
  here. ``plain_text`` is the fallback a platform sends when Slack refuses the blocks: no
  markers, the same three escapes.
- **Code stays code.** A fence becomes a bare ```` ``` ```` line (Slack shows a language
  name as code), a fence still open at the end is closed, nothing inside is interpreted.

What changes: ``**bold**`` -> ``*bold*``, ``~~x~~`` -> ``~x~``, ``-# subtext`` and ``# headings``
-> italic and bold lines, ``[text](url)`` -> ``<url|text>``, ``<https://…>`` -> ``<https://…>``,
``<@id>`` -> a Slack mention when ``id`` is a Slack user id (else ``@id``; only the core
writes one: the renderer escapes the agent's as ``\\<@id>``, shown as the text ``<@id>``),
``||x||`` -> x.
Single ``*``/``_`` are left as typed (far more often a glob or a snake_case name). Slack has
no way to escape ``*``, ``_`` or ``~``; mrkdwn only treats them as markers at word edges.
"""

from __future__ import annotations

import re

__all__ = ["escape", "plain_text", "split_sections", "to_mrkdwn"]

FENCE = "```"

_INLINE = re.compile(
    r"(?P<code>(?P<ticks>`+)(?P<code_body>.+?)(?P=ticks))"
    r"|<(?P<url>https?://[^\s<>]+)>"
    r"|(?P<inert>\\<@)"
    r"|<@!?(?P<mention>[A-Za-z0-9]+)>"
    r"|\[(?P<label>[^\]\n]+)\]\((?P<href>https?://[^\s()<>]+)\)"
    r"|\*\*(?P<bold>.+?)\*\*"
    r"|~~(?P<strike>.+?)~~"
    r"|\|\|(?P<spoiler>.+?)\|\|"
)
_HEADING = re.compile(r"^(#{1,3}) +(.+)$")
_SLACK_USER = re.compile(r"^[UW][A-Z0-9]{2,}$")


def escape(text: str) -> str:
    """Slack's three escapes (and nothing else: quotes stay as typed)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _link_target(url: str) -> str:
    return escape(url).replace("|", "%7C")


def _wrap(marker: str, body: str) -> str:
    """``body`` between markers, which Slack honours only without spaces just inside."""
    inner = body.strip()
    if not inner:
        return body
    lead, trail = body[: len(body) - len(body.lstrip())], body[len(body.rstrip()) :]
    return f"{lead}{marker}{inner}{marker}{trail}"


def _inline(text: str, *, markers: bool = True) -> str:
    out: list[str] = []
    last = 0
    for match in _INLINE.finditer(text):
        out.append(escape(text[last : match.start()]))
        last = match.end()
        if match.group("code") is not None:
            # The renderer escapes every agent mention; in code it is only text.
            body = escape(match.group("code_body").replace("`", "'").replace("\\<@", "<@"))
            out.append(f"`{body}`" if markers else body)
        elif match.group("url") is not None:
            out.append(f"<{_link_target(match.group('url'))}>" if markers else match.group("url"))
        elif match.group("inert") is not None:
            out.append("&lt;@")  # the agent's mention, escaped by the renderer: text only
        elif match.group("mention") is not None:
            user = match.group("mention")
            if markers and _SLACK_USER.match(user):
                out.append(f"<@{user}>")
            else:
                out.append(f"@{user}")
        elif match.group("href") is not None:
            label = escape(match.group("label")).replace("|", "/")
            if markers:
                out.append(f"<{_link_target(match.group('href'))}|{label}>")
            else:
                out.append(f"{label} ({escape(match.group('href'))})")
        elif match.group("bold") is not None:
            body = _inline(match.group("bold"), markers=markers)
            out.append(_wrap("*", body) if markers else body)
        elif match.group("strike") is not None:
            body = _inline(match.group("strike"), markers=markers)
            out.append(_wrap("~", body) if markers else body)
        else:
            out.append(_inline(match.group("spoiler"), markers=markers))
    out.append(escape(text[last:]))
    return "".join(out)


def _line(line: str, markers: bool) -> str:
    if line.startswith("-# "):
        body = _inline(line[3:], markers=markers)
        return _wrap("_", body) if markers else body
    heading = _HEADING.match(line)
    if heading is not None:
        body = _inline(heading.group(2), markers=markers)
        return _wrap("*", body) if markers else body
    return _inline(line, markers=markers)


def _convert(text: str, markers: bool) -> str:
    out: list[str] = []
    in_fence = False
    for line in text.split("\n"):
        stripped = line.strip()
        if not in_fence and stripped.startswith(FENCE):
            in_fence = True
            if markers:
                out.append(FENCE)
            rest = stripped[3:]
            if rest.endswith(FENCE) and len(rest) >= 3 and rest.strip("`"):
                # ```code``` on one line: its language is no language here
                out.append(escape(rest[:-3].replace("\\<@", "<@")))
                if markers:
                    out.append(FENCE)
                in_fence = False
            continue
        if in_fence and stripped.startswith(FENCE) and not stripped.strip("`"):
            in_fence = False
            if markers:
                out.append(FENCE)
            continue
        if in_fence:
            # The renderer escapes every agent mention; in code it is only text.
            out.append(escape(line.replace(FENCE, "'''").replace("\\<@", "<@")))
        else:
            out.append(_line(line, markers))
    if in_fence and markers:
        out.append(FENCE)
    return "\n".join(out)


def to_mrkdwn(text: str) -> str:
    """The text in Slack's mrkdwn (see the module docstring)."""
    return _convert(text, markers=True)


def plain_text(text: str) -> str:
    """The fallback: what the mrkdwn shows, without markers, still escaped for Slack."""
    return _convert(text, markers=False)


def split_sections(mrkdwn: str, limit: int) -> list[str]:
    """``mrkdwn`` in pieces of at most ``limit`` characters, cut at line ends (a longer
    line is cut where it must); a code block cut in two is closed and opened again."""
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    in_fence = False
    for line in mrkdwn.split("\n"):
        while len(line) > limit - 8:  # room for the fences a cut adds
            head, line = line[: limit - 8], line[limit - 8 :]
            if head.rfind("&") > len(head) - 5:  # never cut an escape in two
                cut = head.rfind("&")
                head, line = head[:cut], head[cut:] + line
            opening = head.rfind("<")
            if opening > 0 and head.rfind(">") < opening:
                # nor a link or mention (<url|label>, <@U…>): Slack would show it raw
                head, line = head[:opening], head[opening:] + line
            pieces.extend(_flush(current + [head], in_fence))
            current, size = ([FENCE] if in_fence else []), (4 if in_fence else 0)
        if size + len(line) + 1 > limit - 4 and current:
            pieces.extend(_flush(current, in_fence))
            current, size = ([FENCE] if in_fence else []), (4 if in_fence else 0)
        current.append(line)
        size += len(line) + 1
        if line.strip() == FENCE:
            in_fence = not in_fence
    if current and "\n".join(current).strip():
        pieces.append("\n".join(current))
    return pieces


def _flush(lines: list[str], in_fence: bool) -> list[str]:
    text = "\n".join(lines + ([FENCE] if in_fence else []))
    return [text] if text.strip() else []

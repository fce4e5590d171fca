"""The chat dialect the renderer writes (Discord markdown) -> safe HTML for the web chat.

One job: text an agent wrote becomes HTML that can never run script in the page. It goes
through markdown-it-py with raw HTML **off** (``<script>`` and every other tag is shown as
text), links only to the web and to mail (``http:``, ``https:``, ``mailto:``) or relative
ones: any other scheme (``javascript:``, ``data:``, but also ``tel:``, ``ms-word:`` or a
made-up ``x-app:`` that would hand the click to whatever program claims it) stays text,
and images are not drawn (an image from an agent's text would be fetched from wherever
it points; it stays text). What Discord has beyond CommonMark is added: a single newline
is a line break, ``~~strike~~``, tables, and ``-# `` subtext lines (the renderer's
tool-card headers, footers and prompt outcomes) as ``<p class="subtext">``.
Links open in a new tab without a referrer or an opener; a mention ``<@id>`` reads ``@id``.

The page's Content-Security-Policy (``ingress.web.security``) forbids inline script as a
second wall; this module is the first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.rules_block import StateBlock
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

__all__ = ["message_kind", "to_html"]

SUBTEXT = "-# "


def _subtext(state: StateBlock, start_line: int, end_line: int, silent: bool) -> bool:
    """A ``-# `` line (Discord's small grey text) is a paragraph of its own."""
    if state.sCount[start_line] - state.blkIndent >= 4:
        return False  # indented code
    pos = state.bMarks[start_line] + state.tShift[start_line]
    end = state.eMarks[start_line]
    if not state.src.startswith(SUBTEXT, pos) or pos + len(SUBTEXT) > end:
        return False
    if silent:
        return True
    opened = state.push("subtext_open", "p", 1)
    opened.attrSet("class", "subtext")
    opened.map = [start_line, start_line + 1]
    inline = state.push("inline", "", 0)
    inline.content = state.src[pos + len(SUBTEXT) : end].strip()
    inline.map = [start_line, start_line + 1]
    inline.children = []
    state.push("subtext_close", "p", -1)
    state.line = start_line + 1
    return True


def _link_open(
    self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
    tokens[idx].attrSet("target", "_blank")
    return str(self.renderToken(tokens, idx, options, env))


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_LINKED_SCHEMES = frozenset({"http", "https", "mailto"})


def _validate_link(url: str) -> bool:
    """A link is made only to the web, to mail, or relative (no scheme at all)."""
    scheme = _SCHEME.match(url)
    return scheme is None or scheme.group(1).lower() in _LINKED_SCHEMES


def _as_written(rule: Any) -> Any:
    """``rule`` (code's), showing the renderer's escape of an agent mention (``\\<@``) as
    written: in code it is only text."""

    def render(
        self: Any, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
    ) -> str:
        tokens[idx].content = tokens[idx].content.replace("\\<@", "<@")
        return str(rule(tokens, idx, options, env))

    return render


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "breaks": True, "linkify": False})
    md.validateLink = _validate_link  # type: ignore[method-assign]
    md.enable(["table", "strikethrough"])
    md.disable("image")  # an image would be loaded from wherever the agent pointed it
    md.block.ruler.before(
        "list", "subtext", _subtext, {"alt": ["paragraph", "reference", "blockquote"]}
    )
    md.add_render_rule("link_open", _link_open)
    assert isinstance(md.renderer, RendererHTML)
    for name in ("code_inline", "fence", "code_block"):
        md.add_render_rule(name, _as_written(md.renderer.rules[name]))
    return md


_MD = _parser()


# Not an escaped one (``\\<@id>``: the agent's, which markdown shows as the text <@id>).
_MENTION = re.compile(r"(?<!\\)<@!?([\w.\-]{1,64})>")


def to_html(text: str) -> str:
    """``text`` (the renderer's Discord markdown) as HTML safe to put into the page. A
    Discord mention (``<@id>``, as the core names who answered a prompt) reads ``@id``."""
    html: str = _MD.render(_MENTION.sub(r"@\1", text))
    return html


def message_kind(text: str) -> str:
    """What a message shows, for the page's styling only (``tool``, ``permission``,
    ``question``, ``subtext`` or ``text``): the renderer's outputs carry no kind, but each
    kind starts the same way (``effects.chunking``)."""
    if text.startswith(SUBTEXT + "🔧"):
        return "tool"
    if text.startswith("🔐"):
        return "permission"
    if text.startswith("❓"):
        return "question"
    if text.startswith(SUBTEXT) and "\n" not in text:
        return "subtext"
    return "text"

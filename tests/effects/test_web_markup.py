"""``effects.web_markup``: the renderer's Discord markdown as HTML that cannot run script,
whatever an agent writes (examples, then a hypothesis search over hostile text)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from threadspindle.effects.chunking import permission_text, render_tool_card
from threadspindle.effects.web_markup import message_kind, to_html


def test_markdown_is_drawn() -> None:
    html = to_html("**bold** _it_ ~~gone~~ `code`\nnext line\n\n```py\nx = 1 < 2\n```")
    assert "<strong>bold</strong>" in html and "<em>it</em>" in html and "<s>gone</s>" in html
    assert "<code>code</code>" in html and "<br />" in html
    assert '<pre><code class="language-py">x = 1 &lt; 2\n</code></pre>' in html


def test_subtext_lines_and_mentions() -> None:
    html = to_html("answer\n-# 2.1s · $0.01 · Allowed by <@you>")
    assert '<p class="subtext">2.1s · $0.01 · Allowed by @you</p>' in html
    card = to_html(render_tool_card("Bash ls\n→ a\nb"))
    assert card.startswith('<p class="subtext">🔧 <code>Bash ls</code></p>')
    assert "<pre><code>a\nb\n</code></pre>" in card
    assert to_html("```\n-# inside a fence\n```") == "<pre><code>-# inside a fence\n</code></pre>\n"


def test_links_are_safe_and_open_elsewhere() -> None:
    html = to_html("[ok](https://example.org) [bad](javascript:alert(1)) <https://x.org>")
    assert html.count("<a ") == 2
    assert 'rel="noopener noreferrer nofollow" target="_blank"' in html
    assert 'href="javascript' not in html and "[bad](javascript:alert(1))" in html
    assert "<img" not in to_html("![pic](https://example.org/x.png)")


def test_only_web_mail_and_relative_links_are_made() -> None:
    for text in ('<aa:"><iframe src=//evil>', "<tel:123>", "[w](ms-word:ofe|u|x)", "<X-App:go>"):
        assert "<a " not in to_html(text), text
    for text, href in (
        ("<HTTPS://Example.org/x>", "HTTPS://Example.org/x"),
        ("[m](mailto:a@b.example)", "mailto:a@b.example"),
        ("[top](#top)", "#top"),
        ("[file](docs/a:b.md)", "docs/a:b.md"),  # a colon after a slash: a path, no scheme
    ):
        assert f'href="{href}"' in to_html(text), text


def test_kinds() -> None:
    assert message_kind(render_tool_card("Bash")) == "tool"
    assert message_kind(permission_text("Bash", "rm -rf /")) == "permission"
    assert message_kind("❓ **Question:** ?") == "question"
    assert message_kind("-# 1.0s · $0") == "subtext"
    assert message_kind("plain") == "text"


HOSTILE = st.lists(
    st.sampled_from(
        [
            "<script>alert(1)</script>",
            "<img src=x onerror=alert(1)>",
            "<svg onload=alert(1)>",
            '"><iframe src=//evil>',
            "[x](javascript:alert(1))",
            "[x](JAVASCRIPT:alert(1))",
            "[x](data:text/html,<script>alert(1)</script>)",
            "<a href='javascript:x'>a</a>",
            "`<b>`",
            "```\n<script>\n```",
            "-# <script>",
            "> <style>",
            "| a |\n|---|\n| <x> |",
            "<https://ok.example>",
            "**",
            "\n",
            " ",
            "&lt;",
            "<!-- c -->",
            "<@1>",
        ]
    )
    | st.text(alphabet="<>\"'&=/:;()[]`*_-#! \nabcjsx", max_size=12),
    max_size=12,
).map("".join)


@given(HOSTILE)
def test_no_text_becomes_markup_that_runs(text: str) -> None:
    html = to_html(text)
    tags = re.findall(r"<\s*([a-zA-Z][\w-]*)", html)
    allowed = {
        "p",
        "br",
        "strong",
        "em",
        "s",
        "code",
        "pre",
        "a",
        "blockquote",
        "ul",
        "ol",
        "li",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "hr",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
    }
    assert set(tags) <= allowed, (text, html)
    for attribute in re.findall(r"\s([a-zA-Z-]+)=\"", html):
        assert attribute in {"href", "rel", "target", "class", "style"}, (text, html)
    for href in re.findall(r'href="([^"]*)"', html):
        # Relative, or to the web or mail: hypothesis once made '<aa:">' an "aa:" link.
        scheme = re.match(r"([A-Za-z][A-Za-z0-9+.\-]*):", href)
        assert scheme is None or scheme.group(1).lower() in {"http", "https", "mailto"}, html
    for style in re.findall(r'style="([^"]*)"', html):  # table alignment only
        assert re.fullmatch(r"text-align:(left|right|center)", style), html

"""``effects.slack_markup``: the renderer's markdown as Slack mrkdwn, judged by what the fake
Slack shows of it and by its list of misread spots (``testkit.fake_slack.mrkdwn``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from threadspindle.effects.slack_markup import escape, plain_text, split_sections, to_mrkdwn
from threadspindle.testkit.fake_slack.mrkdwn import problems, visible


def test_the_three_escapes_and_nothing_else() -> None:
    assert escape('a < b && c > "d"') == 'a &lt; b &amp;&amp; c &gt; "d"'


def test_markdown_becomes_mrkdwn() -> None:
    text = "**bold** and ~~gone~~ and `x<y>` see [docs](https://e.com/a?b=1&c=2) <https://e.com>"
    out = to_mrkdwn(text)
    assert "*bold*" in out and "~gone~" in out and "`x&lt;y&gt;`" in out
    assert "<https://e.com/a?b=1&amp;c=2|docs>" in out and "<https://e.com>" in out
    assert visible(out) == "bold and gone and x<y> see docs https://e.com"
    assert problems(out) == []


def test_headings_subtext_and_mentions() -> None:
    out = to_mrkdwn("# Title\n-# a note\nhi <@U0123ABC> and <@1234>")
    assert out.splitlines() == ["*Title*", "_a note_", "hi <@U0123ABC> and @1234"]


def test_code_blocks_keep_everything_and_lose_their_language() -> None:
    out = to_mrkdwn("before\n```python\nif a < b and **c**:\n    x = '&'\n```\nafter")
    assert out.splitlines() == [
        "before",
        "```",
        "if a &lt; b and **c**:",
        "    x = '&amp;'",
        "```",
        "after",
    ]
    assert "if a < b and **c**:" in visible(out)


def test_an_open_fence_is_closed() -> None:
    assert to_mrkdwn("```\nstill streaming").splitlines() == ["```", "still streaming", "```"]


def test_plain_text_has_no_markers_and_stays_escaped() -> None:
    out = plain_text("**bold** <https://e.com> a<b\n```\ncode\n```")
    assert out == "bold https://e.com a&lt;b\ncode"


def test_sections_are_cut_at_line_ends_with_code_reopened() -> None:
    body = "\n".join(f"line {i} " + "x" * 40 for i in range(200))
    mrkdwn = to_mrkdwn(f"intro\n```\n{body}\n```\nend")
    pieces = split_sections(mrkdwn, 3000)
    assert len(pieces) > 3 and all(len(p) <= 3000 for p in pieces)
    assert all(p.count("```") % 2 == 0 for p in pieces)  # each piece's code is closed
    shown = "\n".join(visible(p) for p in pieces)
    assert all(f"line {i} " in shown for i in range(200))


@given(st.text(alphabet=st.sampled_from(list("ab <>&*_~`#-|[]()@:/\n")), max_size=300))
def test_nothing_the_agent_writes_is_misread(text: str) -> None:
    out = to_mrkdwn(text)
    assert problems(out) == [], out
    for piece in split_sections(out, 200):
        assert len(piece) <= 200 and problems(piece) == []
    assert problems(plain_text(text)) == []


def test_a_long_line_is_never_cut_inside_a_link_or_a_mention() -> None:
    # Escaping pushed a 2,800-character line over the limit: the cut fell inside <url|label>.
    text = "&" * 590 + " see [the docs](https://example.com/" + "d" * 40 + ") and <@U0ABCDEF1> " * 3
    for piece in split_sections(to_mrkdwn(text), 3000):
        assert len(piece) <= 3000
        assert piece.count("<") == piece.count(">")

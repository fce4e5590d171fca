"""effects.chunking: splitting at the char limit on line boundaries, fence repair, links."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from render_samples import balanced, long_answer, original_text

from threadspindle.effects.chunking import (
    MessageChunker,
    fit_message,
    split_message,
    text_length,
    thinking_preview,
    wrap_bare_links,
)


def test_long_answer_becomes_well_formed_messages() -> None:
    answer = long_answer(6000)
    assert len(answer) >= 6000
    messages = split_message(answer, 1900)
    assert 4 <= len(messages) <= 5
    assert all(len(m) <= 1900 for m in messages)
    assert all(balanced(m) for m in messages)
    # Line boundaries: every message but the last ends a line (a repair adds the fence).
    assert all(m.endswith("\n") or m.endswith("\n```") for m in messages[:-1])
    assert original_text(messages, answer) == answer
    joined = "".join(messages)
    assert "https://example.com" not in joined.replace("<https://example.com", "")
    assert "<https://example.com/docs/step1>" in joined


def test_a_cut_inside_a_code_block_closes_and_reopens_the_fence_with_its_language() -> None:
    code = "".join(f"const v{i} = {i};\n" for i in range(200))
    text = f"Here:\n```typescript\n{code}```\nDone."
    messages = split_message(text, 500)
    assert len(messages) > 3
    assert messages[0].startswith("Here:\n```typescript\n")
    for message in messages[1:-1]:
        assert message.startswith("```typescript\nconst v")
        assert message.endswith("\n```")
    assert messages[-1].endswith("```\nDone.")
    assert all(balanced(m) and len(m) <= 500 for m in messages)
    assert original_text(messages, text) == text


def test_a_line_longer_than_a_message_is_cut_at_a_space_or_hard() -> None:
    words = " ".join(f"w{i:04d}" for i in range(400))  # one 2399-char line
    messages = split_message(words, 300)
    assert all(len(m) <= 300 for m in messages)
    assert all(m.endswith(" ") for m in messages[:-1])  # cut after a space
    assert "".join(messages) == words
    solid = "x" * 1000
    assert "".join(split_message(solid, 300)) == solid


def test_streaming_gives_the_same_messages_as_one_piece() -> None:
    answer = long_answer(6000)
    chunker = MessageChunker(1900)
    live_lengths = []
    for i in range(0, len(answer), 7):
        chunker.feed(answer[i : i + 7])
        live_lengths.append(len(chunker.live_text()))
    chunker.finish()
    assert chunker.take_closed() == split_message(answer, 1900)
    assert max(live_lengths) <= 1900


def test_the_live_text_closes_an_open_code_block_for_display() -> None:
    chunker = MessageChunker(1900)
    chunker.feed("Code:\n```python\nx = 1\ny = ")
    assert chunker.live_text() == "Code:\n```python\nx = 1\ny = \n```"
    assert MessageChunker(1900, close_live_fence=False).live_text() == ""


def test_bare_links_are_wrapped_and_others_left_alone() -> None:
    line = (
        "See https://a.example/x, [docs](https://b.example/y), <https://c.example/z>, "
        "`curl https://d.example/q` and (https://e.example/w)."
    )
    assert wrap_bare_links(line) == (
        "See <https://a.example/x>, [docs](https://b.example/y), <https://c.example/z>, "
        "`curl https://d.example/q` and (https://e.example/w)."
    )
    assert wrap_bare_links("wiki https://w.org/A_(b) end") == "wiki <https://w.org/A_(b)> end"
    # Inside a code block nothing is wrapped.
    code = "```\nGET https://api.example/v1\n```"
    assert split_message(code, 1900) == [code]


def test_a_fence_line_longer_than_a_message_is_plain_text() -> None:
    # Pathological: no message can hold the line, so it is cut into plain pieces.
    line = "```py " + "y" * 500
    messages = split_message(line + "\nafter", 200)
    assert "".join(messages) == line + "\nafter"
    assert all(len(m) <= 200 for m in messages)


def test_fit_message_truncates_to_one_balanced_message() -> None:
    text = "```\n" + "line\n" * 1000 + "```"
    fitted = fit_message(text, 400)
    assert len(fitted) <= 400 and balanced(fitted)
    assert fitted.endswith("(truncated)")
    assert fit_message("short", 400) == "short"


def test_thinking_preview_is_one_line_of_the_last_characters() -> None:
    thought = "\n".join(f"thought {i} about `code` and **bold**" for i in range(50))
    preview = thinking_preview(thought, truncated=False, width=200)
    assert preview.startswith("-# 💭 …") and "\n" not in preview
    assert preview.endswith("thought 49 about 'code' and bold")
    assert len(preview) <= len("-# 💭 …") + 200
    assert thinking_preview("  \n ", truncated=False) == ""


# -- the property: nothing but repairs and link brackets is added, nothing is lost -------------

_word = st.text(alphabet="abcdefgh", min_size=1, max_size=10)
_token = st.one_of(
    _word,
    _word,
    _word,
    st.sampled_from(["https://ex.com/a", "http://b.io/x?y=1", "https://q.org/p."]),
    _word.map(lambda w: f"`{w}`"),
    st.sampled_from(["`", "``", "a```", "`b`"]),  # backticks that are no fence
    st.integers(150, 450).map(lambda n: "y" * n),
)
_line = st.one_of(
    st.lists(_token, max_size=14).map(" ".join),
    st.lists(_token, max_size=14).map(" ".join),
    st.sampled_from(["```", "```py", "```json", "  ```", "```"]),
)
texts = st.builds(
    lambda lines, end: "\n".join(lines) + end,
    st.lists(_line, max_size=50),
    st.sampled_from(["", "\n"]),
)


@given(text=texts, data=st.data())
def test_messages_concatenate_to_the_input(text: str, data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=40)))
    chunker = MessageChunker(200)
    last = 0
    for cut in [*cuts, len(text)]:
        chunker.feed(text[last:cut])
        assert len(chunker.live_text()) <= 200
        last = cut
    chunker.finish()
    messages = chunker.take_closed()
    assert all(len(m) <= 200 for m in messages)
    assert all(balanced(m) for m in messages)
    assert original_text(messages, text) == text


@given(text=texts, data=st.data())
def test_a_delta_that_fits_closes_no_message(text: str, data: st.DataObject) -> None:
    """``fits`` (what lets a renderer append without a platform call) never says yes to a
    delta that closes a message, whatever was fed before it: links, fences, long lines."""
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=40)))
    chunker = MessageChunker(200)
    last = 0
    for cut in [*cuts, len(text)]:
        delta = text[last:cut]
        fits = chunker.fits(delta)
        chunker.feed(delta)
        closed = chunker.take_closed()
        if fits:
            assert closed == [], (delta, closed)
        last = cut
    chunker.finish()
    assert not chunker.fits("x")  # nothing more goes into a finished text


def test_fits_says_yes_far_from_the_budget_and_no_near_it() -> None:
    chunker = MessageChunker(200)
    assert chunker.fits("hello https://example.com/a ")
    chunker.feed("a" * 150)
    assert chunker.fits("b" * 10)
    assert not chunker.fits("b" * 60)  # might close the message: only feeding tells
    chunker.feed("\n")
    assert not chunker.fits("see https://example.com/" + "c" * 30)


def test_split_by_utf16_units_keeps_every_message_within_the_budget() -> None:
    # Telegram counts UTF-16 units: an emoji outside the BMP is two of them.
    text = "".join(f"line {i} 😀😀😀 {'👨‍👩‍👧‍👦' * (i % 5)}\n" for i in range(400))
    text += "😀" * 5000  # one line longer than a message, without a space
    messages = split_message(text, 1000, wrap_links=False, unit="utf16")
    assert all(text_length(m, "utf16") <= 1000 for m in messages)
    assert "".join(messages) == text


def test_a_utf16_chunker_never_shows_more_than_the_budget() -> None:
    chunker = MessageChunker(200, wrap_links=False, unit="utf16")
    for _ in range(300):
        chunker.feed("😀")
        assert text_length(chunker.live_text(), "utf16") <= 200


def test_a_line_without_spaces_is_never_cut_inside_one_character() -> None:
    family = "👨\u200d👩\u200d👧\u200d👦"
    for text in (family * 300, "e\u0301" * 1500, "❤\ufe0f" * 1500, "🇫🇷🇩🇪" * 600):
        messages = split_message(text, 1000, wrap_links=False)
        assert "".join(messages) == text
        for left, right in zip(messages, messages[1:], strict=False):
            assert right[0] not in "\u200d\ufe0f\u0301" and left[-1] != "\u200d"
            assert not ("🇦" <= right[0] <= "🇿" and len(left.rstrip()) % 2 == 1)

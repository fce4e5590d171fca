"""ingress.input_checks: a value that cannot be a path, a name or a queue position is
refused with a sentence naming the problem; nothing else is ever raised."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from threadspindle.ingress.input_checks import (
    MAX_PATH_BYTES,
    InputRefused,
    check_path,
    check_word,
    has_visible_text,
    parse_position,
)


def test_paths() -> None:
    assert check_path("~/code/app") == "~/code/app"
    assert check_path("sub dir/ünïcode") == "sub dir/ünïcode"
    with pytest.raises(InputRefused, match="NUL character"):
        check_path("a\0b")
    with pytest.raises(InputRefused, match="control character"):
        check_path("a\x1b[2Jb")
    with pytest.raises(InputRefused, match=f"longer than {MAX_PATH_BYTES} bytes"):
        check_path("x" * (MAX_PATH_BYTES + 1))


def test_visible_text() -> None:
    assert has_visible_text("hi") and has_visible_text("\0hi\x1b")
    assert not has_visible_text("")
    assert not has_visible_text(" \t\n")
    assert not has_visible_text("\0" * 100)
    assert not has_visible_text("\x1b\x07 \x9b")


def test_words() -> None:
    assert check_word("claude-sonnet-4-5", "model name") == "claude-sonnet-4-5"
    with pytest.raises(InputRefused, match="model name contains a NUL"):
        check_word("a\0b", "model name")
    with pytest.raises(InputRefused, match="one word"):
        check_word("two words", "session id")
    with pytest.raises(InputRefused, match="one word"):
        check_word("", "session id")
    with pytest.raises(InputRefused, match="longer than 64"):
        check_word("x" * 65, "thread name", 64)


def test_positions_are_ascii_digits() -> None:
    assert parse_position("2") == 2
    assert parse_position(" 10 ") == 10
    assert parse_position("0\x1f") == 0  # str.strip takes \x1f, int() does not (Hypothesis)
    for bad in ("²", "٣", "-1", "1.5", "abc", "", "1" * 12):
        with pytest.raises(InputRefused, match="must be a number"):
            parse_position(bad)


def test_the_reason_echoes_the_value_escaped_and_short() -> None:
    with pytest.raises(InputRefused) as refused:
        check_path("\x1b]0;pwned\x07" + "y" * 10_000 + "\0")
    text = str(refused.value)
    assert "\x1b" not in text and "\x07" not in text and len(text) < 200


@given(st.text(max_size=5000))
def test_any_text_is_taken_or_refused_never_raised(text: str) -> None:
    for check in (check_path, lambda t: check_word(t, "name"), parse_position):
        try:
            check(text)
        except InputRefused as refused:
            assert str(refused)

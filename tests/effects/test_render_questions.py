"""A question's options reach the user whole on every platform: listed in full, numbered,
in its text when the platform's menu would cut, drop or refuse one; an empty option gets a
placeholder label; Discord's values stay distinct (it refuses two alike)."""

from __future__ import annotations

from threadspindle.effects.chunking import EMPTY_OPTION, question_text
from threadspindle.effects.discord_platform import _select_options

LONG = "Use the configuration file located at " + "x" * 80
ALIKE = (LONG + " version ONE", LONG + " version TWO")


def test_options_a_menu_cuts_are_listed_in_full() -> None:
    text = question_text(
        "Which?", has_options=True, multiple=False, options=ALIKE, option_chars=100
    )
    assert f"\n1. {ALIKE[0]}\n2. {ALIKE[1]}" in text


def test_options_a_menu_drops_are_listed() -> None:
    options = tuple(f"option {i}" for i in range(30))
    text = question_text(
        "Which?", has_options=True, multiple=False, options=options, menu_options=25
    )
    assert "\n30. option 29" in text


def test_an_empty_option_is_listed_with_its_placeholder() -> None:
    text = question_text("Which?", has_options=True, multiple=False, options=("", "yes"))
    assert f"\n1. {EMPTY_OPTION}\n2. yes" in text


def test_options_that_fit_are_not_repeated() -> None:
    text = question_text("Which?", has_options=True, multiple=False, options=("a", "b"))
    assert text == "❓ **Question:** Which?"


def test_discord_options_have_labels_and_distinct_values() -> None:
    options = _select_options((*ALIKE, "", "yes"))
    values = [option.value for option in options]
    assert len(set(values)) == len(values)
    assert all(1 <= len(v) <= 100 for v in values)
    assert all(1 <= len(option.label) <= 100 for option in options)
    assert options[2].label == EMPTY_OPTION
    assert values[1].startswith("2. ") and values[3] == "yes"

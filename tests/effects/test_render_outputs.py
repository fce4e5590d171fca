"""effects.render_outputs: the renderer's bookkeeping alone (pure: no platform, no clock)."""

from __future__ import annotations

from render_samples import long_answer

from threadspindle.effects.chunking import MessageChunker
from threadspindle.effects.render_outputs import (
    MAX_KEPT_OUTPUTS,
    Output,
    OutputBook,
    RenderTally,
)
from threadspindle.runtime.core.effect_types import Button


def nothing_busy() -> list[Output]:
    return []


def test_a_key_is_admitted_once() -> None:
    book, tally = OutputBook(), RenderTally()
    assert book.admit("k", tally, nothing_busy)
    book.add(Output("k", "block"))
    assert not book.admit("k", tally, nothing_busy)
    assert not book.admit("k", tally, nothing_busy)
    assert tally.duplicate_posts == 2 and len(book) == 1


def test_seeded_keys_are_never_posted_again_and_their_ids_accumulate() -> None:
    book, tally = OutputBook(), RenderTally()
    book.known("k", ("m1",))
    book.known("k", ["m1", "m2"])  # a repeated report adds only what is new
    book.known("k", ("m3",))
    assert book.message_ids("k") == ("m1", "m2", "m3")
    assert book.message_ids("other") == ()
    assert not book.admit("k", tally, nothing_busy)
    out = book.get("k")
    assert out is not None and out.mode == "seeded" and out.sealed


def test_each_posted_id_is_reported_once_grouped_by_key() -> None:
    book = OutputBook()
    book.record_posted("a", "m1")
    book.record_posted("b", "m2")
    book.record_posted("a", "m3")
    assert book.take_posted() == [("a", ("m1", "m3")), ("b", ("m2",))]
    assert book.take_posted() == []


def test_messages_are_numbered_in_creation_order_across_outputs() -> None:
    book = OutputBook()
    first, second = book.add(Output("a", "block")), book.add(Output("b", "block"))
    seqs = [
        book.new_message(first, "1").seq,
        book.new_message(second, "2").seq,
        book.new_message(first, "3").seq,
    ]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    assert [m.final for m in first.messages] == ["1", "3"]


def test_a_full_book_forgets_the_older_half_but_not_what_is_still_needed() -> None:
    book, tally = OutputBook(), RenderTally()
    prompt = book.add(Output("prompt", "prompt", sealed=True))
    book.new_message(prompt, "Allow?").buttons = (Button(label="Accept", action="a"),)
    busy = book.add(Output("busy", "card", sealed=True))
    open_stream = book.add(Output("open", "stream"))  # not sealed yet
    for n in range(MAX_KEPT_OUTPUTS - 3):
        book.add(Output(f"k{n}", "block", sealed=True))
    assert len(book) == MAX_KEPT_OUTPUTS
    assert book.admit("new", tally, lambda: [busy])
    assert len(book) == MAX_KEPT_OUTPUTS // 2 + 3
    for kept in (prompt, busy, open_stream):
        assert book.get(kept.key) is kept
    assert book.get("k0") is None and book.get(f"k{MAX_KEPT_OUTPUTS - 4}") is not None


def test_a_message_shows_its_final_text_else_the_open_part_of_its_stream() -> None:
    book = OutputBook()
    out = book.add(Output("k", "stream", chunker=MessageChunker(100)))
    assert out.chunker is not None
    out.chunker.feed("done line\nhalf")
    live = book.new_message(out, None)
    assert out.wanted(live, whole_lines=False) == "done line\nhalf"
    assert out.wanted(live, whole_lines=True) == "done line\n"
    live.final = "final"
    assert out.wanted(live, whole_lines=False) == "final"
    out.chunker = None  # sealed: a message without a final text keeps what it shows
    other = book.new_message(out, None)
    other.shown = "as shown"
    assert out.wanted(other, whole_lines=False) == "as shown"


def test_rendered_texts_of_each_non_streamed_kind() -> None:
    card = Output("c", "card", text="Read(a.py)")
    assert card.rendered_texts(1900, wrap_links=True) == ["-# 🔧 `Read(a.py)`"]
    preview = Output("p", "preview", text="thinking about https://x.io/a")
    assert preview.rendered_texts(1900, wrap_links=True) == [
        "-# 💭 thinking about <https://x.io/a>"
    ]
    assert preview.rendered_texts(1900, wrap_links=False) == ["-# 💭 thinking about https://x.io/a"]
    assert Output("e", "preview").rendered_texts(1900, wrap_links=True) == []
    block = Output("b", "block", text=long_answer(4000))
    texts = block.rendered_texts(1900, wrap_links=True)
    assert len(texts) == 3 and all(len(t) <= 1900 for t in texts)

"""``RefusalNotes`` (``ingress/refusal_notes.py``): a refused sender is told at most once
per interval, and a flood of strangers costs bounded memory."""

from __future__ import annotations

from threadspindle.ingress.refusal_notes import RefusalNotes


def test_each_sender_is_told_once_per_interval() -> None:
    notes = RefusalNotes(interval_s=600.0)
    assert notes.due("alice", 0.0)
    assert not notes.due("alice", 599.0)
    assert notes.due("bob", 100.0)
    assert notes.due("alice", 600.0)  # the interval is over: told again
    assert not notes.due("bob", 650.0)


def test_a_flood_of_strangers_is_held_to_the_limit() -> None:
    notes = RefusalNotes(interval_s=600.0, limit=100)
    for i in range(100_000):
        assert notes.due(f"stranger{i}", i * 0.001)
        assert len(notes) <= 100
    # The newest are remembered; the oldest forgotten ones would only be told again.
    assert not notes.due("stranger99999", 100.0)
    assert notes.due("stranger0", 100.0)


def test_expired_entries_go_even_below_the_limit() -> None:
    notes = RefusalNotes(interval_s=10.0, limit=1000)
    for i in range(50):
        notes.due(i, float(i))
    notes.due("late", 100.0)
    assert len(notes) == 1

"""``tune_gc``: the runtime's collector thresholds, the opt-out, and their effect on the
workload that made them worth it: many threads' states kept alive at once (the store),
built by transitions (many small objects, no cycles)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.model import Policy, ThreadState
from threadspindle.runtime.core.transitions import transition
from threadspindle.runtime.live.tuning import RUNTIME_GC_THRESHOLDS, tune_gc


@pytest.fixture
def restore_gc() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def young_collections_during(work) -> int:
    before = gc.get_stats()[0]["collections"]
    work()
    return gc.get_stats()[0]["collections"] - before


def many_threads(n: int) -> list[ThreadState]:
    """What the store holds after ``n`` threads started a conversation and a run."""
    states = []
    for i in range(n):
        tid = f"t{i}"
        state = ThreadState.new(tid, Policy(allowed_roots=("/tmp",)))
        state = transition(
            state,
            A.ConversationStarted(
                thread_id=tid,
                action_id="c",
                at=0.0,
                agent="fake",
                requested_workdir="/tmp",
                resolved_workdir="/tmp",
            ),
        ).state
        state = transition(
            state, A.UserMessage(thread_id=tid, action_id="u", at=0.0, author_id="a", text="go")
        ).state
        states.append(state)
    return states


def test_tune_gc_sets_the_runtime_thresholds_and_returns_the_old_ones(restore_gc) -> None:
    gc.set_threshold(700, 10, 10)
    assert tune_gc() == (700, 10, 10)
    assert gc.get_threshold() == RUNTIME_GC_THRESHOLDS
    assert tune_gc() == RUNTIME_GC_THRESHOLDS  # idempotent
    assert gc.isenabled()  # tuned, not turned off


def test_spindle_gc_default_keeps_cpythons_thresholds(restore_gc, monkeypatch) -> None:
    gc.set_threshold(700, 10, 10)
    monkeypatch.setenv("SPINDLE_GC", "default")
    assert tune_gc() == (700, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_far_fewer_collections_while_many_threads_are_alive(restore_gc) -> None:
    gc.set_threshold(700, 10, 10)
    default = young_collections_during(lambda: many_threads(1000))
    tune_gc()
    tuned = young_collections_during(lambda: many_threads(1000))
    assert default >= 10  # the default collects all the time on this workload ...
    assert tuned * 10 <= default  # ... the runtime's thresholds at least 10x less often

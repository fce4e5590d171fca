"""A chat gateway's read-only view of the threads it serves: each thread's state folded from
its JetStream log, so the chat ingress (which asks ``snapshot(thread)`` synchronously: has
this thread a conversation, where does it work, what is queued) can run on a node that
holds no thread state of its own.

Folding the log also gives the effects each action made (the core is deterministic), so a
view knows the whole text of the thread's last few text outputs (``RECENT_OUTPUTS``) and
whether each is sealed: a gateway that took over from one that died mid-stream shows each
whole in the message already posted (``recent_outputs``; ``StreamRenderer.resume_stream``)
instead of leaving it cut where the dead one stopped (the appends it had not applied come
again and are dropped by their seq, or were acked). An output opened before the thread's
newest snapshot is not known this way.

A view is a cache, never authoritative: the runner owning the thread writes the log, and
the view follows it by reading the subject from where it last stopped (``refresh``). The
gateway refreshes a thread when it sends one of its actions and when an effect of it is
applied (``mark``: at most one read per thread in flight, the marks in between coalesced).
Between a change and the refresh a view is stale by a few hundred milliseconds: a message
then taken for a prompt although ``/end`` just ended the conversation reaches the runner,
whose core answers it as it would any prompt without a conversation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import trio

from threadspindle.effects.jetstream.connection import STREAM, JetStream, subject_of
from threadspindle.effects.jetstream.subject_read import decode_record, load_thread, read_subject
from threadspindle.runtime.core.actions import Action
from threadspindle.runtime.core.effect_types import (
    AppendOutput,
    EditOutput,
    PostOutput,
    SealOutput,
)
from threadspindle.runtime.core.model import ThreadState
from threadspindle.runtime.core.transitions import transition

__all__ = ["ThreadViews"]

logger = logging.getLogger("spindle.views")

# Text outputs remembered per thread: a gateway taking over shows them whole again (one
# edit each, in the threads it gets effects for); a few cover the runs in flight.
RECENT_OUTPUTS = 4


class ThreadViews:
    """Thread id -> its state as its log says, kept up to date on demand."""

    def __init__(self, conn: JetStream, *, on_action: Callable[[Action], object] | None = None):
        self.conn = conn
        self.states: dict[str, ThreadState] = {}
        self._stream_seq: dict[str, int] = {}  # where each view stopped reading its subject
        self._dirty: set[str] = set()
        self._wake = trio.Event()
        self.last_at: float | None = None  # the newest action seen in any view
        self.on_action = on_action  # told every action folded (catch-up marks)
        self.refreshes = 0
        # thread -> key -> [text so far, seq of its last append, sealed] of the thread's
        # last RECENT_OUTPUTS text outputs, oldest first
        self._outputs: dict[str, dict[str, list[Any]]] = {}

    def snapshot(self, thread_id: str) -> ThreadState | None:
        return self.states.get(thread_id)

    def snapshots(self) -> Mapping[str, ThreadState]:
        return self.states

    def recent_outputs(self, thread_id: str) -> dict[str, tuple[str, int, bool]]:
        """The thread's last text outputs: key -> (text so far, seq of the last append,
        sealed)."""
        return {k: (v[0], v[1], v[2]) for k, v in self._outputs.get(thread_id, {}).items()}

    async def refresh(self, thread_id: str) -> ThreadState | None:
        """Read what the thread's subject gained since this view last read it."""
        self.refreshes += 1
        if thread_id not in self._stream_seq:
            loaded = await load_thread(self.conn, thread_id)
            if loaded.snapshot is None and not loaded.loaded:
                return None
            seq, state = loaded.snapshot or (0, ThreadState.new(thread_id))
            for logged in loaded.loaded:
                state = self._fold(state, logged.action, logged.at)
            self.states[thread_id] = state
            self._stream_seq[thread_id] = loaded.last_stream_seq
            return state
        start = self._stream_seq[thread_id] + 1
        state = self.states[thread_id]
        path = Path(f"jetstream:{STREAM}")
        async for stream_seq, data in read_subject(self.conn, subject_of(thread_id), start=start):
            for logged in decode_record(path, thread_id, stream_seq, data):
                state = self._fold(state, logged.action, logged.at)
            self._stream_seq[thread_id] = stream_seq
        self.states[thread_id] = state
        return state

    def _fold(self, state: ThreadState, action: Action, at: float) -> ThreadState:
        self.last_at = at if self.last_at is None else max(self.last_at, at)
        if self.on_action is not None:
            self.on_action(action)
        result = transition(state, action)
        thread_id = action.thread_id
        for effect in result.effects:
            outputs = self._outputs.setdefault(thread_id, {})
            if isinstance(effect, PostOutput) and effect.kind == "text":
                outputs[effect.key] = [effect.text, -1, False]
                while len(outputs) > RECENT_OUTPUTS:
                    del outputs[next(iter(outputs))]
            elif isinstance(effect, AppendOutput) and effect.key in outputs:
                entry = outputs[effect.key]
                if effect.seq > entry[1]:
                    entry[0] += effect.text
                    entry[1] = effect.seq
            elif isinstance(effect, SealOutput) and effect.key in outputs:
                outputs[effect.key][2] = True
            elif isinstance(effect, EditOutput):
                outputs.pop(effect.key, None)  # no longer a stream: shown as edited
        return result.state

    async def load(self, thread_ids: list[str], *, limit: int = 16) -> None:
        """Read the views of these threads (at a gateway's start), ``limit`` at a time."""
        limiter = trio.CapacityLimiter(limit)

        async def one(thread_id: str) -> None:
            async with limiter:
                await self._refresh_logged(thread_id)

        async with trio.open_nursery() as nursery:
            for thread_id in thread_ids:
                nursery.start_soon(one, thread_id)

    def mark(self, thread_id: str) -> None:
        """Refresh this thread's view soon (``run``)."""
        self._dirty.add(thread_id)
        self._wake.set()

    async def run(
        self, *, interval_s: float = 0.2, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Refresh the marked views until cancelled, at most every ``interval_s``."""
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            dirty, self._dirty = self._dirty, set()
            async with trio.open_nursery() as nursery:
                for thread_id in dirty:
                    nursery.start_soon(self._refresh_logged, thread_id)
            await trio.sleep(interval_s)

    async def _refresh_logged(self, thread_id: str) -> None:
        try:
            await self.refresh(thread_id)
        except Exception as exc:  # a read that failed: the next mark tries again
            logger.warning("could not read the view of %s: %s", thread_id, exc)

"""``RecordingRenderer``: a stand-in for the stream renderer that records what it is asked.

It implements the runtime's ``RendererPort`` (``runtime/live/ports.py``), as the
``StreamRenderer`` does. It keeps every effect it was given (in order, with the trio time),
builds a tiny transcript of what a chat would show, and can be told to fail: the next N
calls, or every call of an effect type, raise ``PlatformError`` so tests can prove the
runtime turns failures into ``EffectFailed`` actions. ``on_post`` is called with each new
keyed output (the crash test appends them to a file). A key posted twice is recorded in
``duplicate_keys``, which every test expects to stay empty. ``known(key, ids)`` takes the
outputs an earlier process posted, as the runtime seeds real renderers after a restart. It
posts only from ``apply`` (no background task), so it never calls ``on_posted``, and
``aclose`` has nothing left to send.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from threadspindle.effects.platform import PlatformError
from threadspindle.runtime.core.effect_types import (
    KEYED_POSTS,
    AppendOutput,
    DismissPrompt,
    EditOutput,
    Effect,
    PostFile,
    SealOutput,
)
from threadspindle.runtime.live.ports import OnPosted, Posted, RendererPort

__all__ = ["RecordingRenderer", "RenderedOutput", "RenderWorld"]


@dataclass
class RenderedOutput:
    key: str
    kind: str
    text: str
    message_id: str
    sealed: bool = False
    dismissed: str | None = None


@dataclass
class RenderWorld:
    """What every thread's renderer wrote, shared so a test can look at all threads."""

    effects: list[tuple[str, float, Effect]] = field(default_factory=list)
    outputs: dict[str, RenderedOutput] = field(default_factory=dict)
    duplicate_keys: list[str] = field(default_factory=list)
    fail_next: int = 0  # the next N apply() calls raise
    fail_types: set[str] = field(default_factory=set)  # effect types that always raise
    failures: int = 0
    latency_s: float = 0.0  # a slow platform
    on_post: Callable[[str, str], None] | None = None  # (thread_id, key)
    known: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def renderer(self, thread_id: str) -> RecordingRenderer:
        return RecordingRenderer(thread_id, self)

    def of_thread(self, thread_id: str) -> list[Effect]:
        return [e for t, _, e in self.effects if t == thread_id]

    def seeded(self, thread_id: str) -> dict[str, tuple[str, ...]]:
        """What the runtime told this thread's renderer was posted by an earlier process."""
        return {k: ids for t, k, ids in self.known if t == thread_id}

    def keys(self, thread_id: str | None = None) -> list[str]:
        return [
            e.key
            for t, _, e in self.effects
            if isinstance(e, KEYED_POSTS) and (thread_id is None or t == thread_id)
        ]

    def texts(self, thread_id: str, kind: str | None = None) -> list[str]:
        prefix = f"{thread_id}/"
        return [
            o.text
            for o in self.outputs.values()
            if o.key.startswith(prefix) and (kind is None or o.kind == kind)
        ]


class RecordingRenderer(RendererPort):
    def __init__(self, thread_id: str, world: RenderWorld | None = None) -> None:
        self.thread_id = thread_id
        self.world = world or RenderWorld()
        self.on_posted: OnPosted | None = None  # never called: it posts only from apply

    def known(self, key: str, message_ids: tuple[str, ...]) -> None:
        """Seeded from the log: ``key`` was posted (by an earlier process) as these ids."""
        self.world.known.append((self.thread_id, key, tuple(message_ids)))
        self.world.outputs.setdefault(key, RenderedOutput(key, "seeded", "", message_ids[0]))

    async def aclose(self) -> list[Posted]:
        await trio.lowlevel.checkpoint()
        return []

    async def apply(self, effect: Effect) -> list[Posted]:
        world = self.world
        if world.latency_s:
            await trio.sleep(world.latency_s)
        else:
            await trio.lowlevel.checkpoint()
        if world.fail_next > 0 or effect.type in world.fail_types:
            world.fail_next = max(0, world.fail_next - 1)
            world.failures += 1
            raise PlatformError(f"injected failure of {effect.type}")
        world.effects.append((self.thread_id, trio.current_time(), effect))
        if isinstance(effect, KEYED_POSTS):
            key = effect.key
            if key in world.outputs:
                # Asked to post a key again (maybe one seeded from an earlier process): a
                # bug in whatever asked. Recorded, and still reported to on_post so a test
                # that counts posts sees it.
                world.duplicate_keys.append(key)
                if world.on_post is not None:
                    world.on_post(self.thread_id, key)
                return []
            message_id = f"m{next(world._ids)}"
            text = getattr(effect, "text", None) or getattr(effect, "question", None) or ""
            if isinstance(effect, PostFile):  # recorded as the file it is
                text = f"{effect.filename}: {effect.caption}\n{effect.content}"
            if not text and hasattr(effect, "tool"):
                text = f"{effect.tool}: {effect.detail}"  # type: ignore[union-attr]
            kind = getattr(effect, "kind", effect.type)
            world.outputs[key] = RenderedOutput(key, kind, text, message_id)
            if world.on_post is not None:
                world.on_post(self.thread_id, key)
            return [(key, (message_id,))]
        if isinstance(effect, AppendOutput) and effect.key in world.outputs:
            world.outputs[effect.key].text += effect.text
        elif isinstance(effect, EditOutput) and effect.key in world.outputs:
            world.outputs[effect.key].text = effect.text
        elif isinstance(effect, DismissPrompt) and effect.key in world.outputs:
            world.outputs[effect.key].dismissed = effect.outcome
        elif isinstance(effect, SealOutput) and effect.key in world.outputs:
            world.outputs[effect.key].sealed = True
        return []

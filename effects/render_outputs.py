"""The stream renderer's bookkeeping: which outputs a channel has, which platform messages
show each one, which keys were posted, and which new message ids are still to be reported.

An *output* is what the core names by a key (a streamed answer, a tool card, a prompt...);
it is shown by one or more platform *messages*. ``OutputBook`` keeps:

- **Posted once.** ``admit(key)`` answers whether a key is new; a key already posted, or
  seeded from the log with ``known`` after a restart, is never posted again.
- **Reported once.** Every message id posted is handed out once by ``take_posted`` (the
  reactor logs it as ``OutputPosted``); ``known`` merges a key's reports back, id by id.
- **Bounded.** At ``MAX_KEPT_OUTPUTS`` keys it forgets the older half of the finished
  ones (never one still being sent or edited, nor a prompt still waiting for its answer).
- **Creation order.** Messages are numbered (``Message.seq``) as they are made: the channel
  shows them in that order.

It makes no platform call and reads no clock. ``Output`` also says what its messages should
show (``wanted``, ``rendered_texts``); ``RenderTally`` is the count the renderer's parts
keep together for ``StreamRenderer.statistics``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from threadspindle.effects.chunking import (
    THINKING_PREVIEW_CHARS,
    LengthUnit,
    MessageChunker,
    fit_message,
    render_tool_card,
    split_message,
    thinking_preview,
    wrap_bare_links,
)
from threadspindle.runtime.core.effect_types import Button

__all__ = ["MAX_KEPT_OUTPUTS", "Message", "Output", "OutputBook", "Posted", "RenderTally"]

MAX_KEPT_OUTPUTS = 4096  # keys remembered; the core never repeats a key that old

Posted = tuple[str, tuple[str, ...]]  # (output key, message ids)


@dataclass
class RenderTally:
    """What the renderer and its parts counted (the retries are the platform's own)."""

    sends: int = 0
    edits: int = 0
    deletes: int = 0
    typing_calls: int = 0
    replies: int = 0
    broken_calls: int = 0  # a platform raising something else than PlatformError
    ignored_appends: int = 0  # duplicate or stale ``seq``, or an unknown key
    duplicate_posts: int = 0  # a key already posted
    blank_skipped: int = 0  # whitespace-only messages never sent


@dataclass(eq=False)
class Message:
    """One platform message of an output. ``final`` None: it shows the output's open part."""

    seq: int
    id: str | None = None
    final: str | None = None
    # Its place among the messages its output ever made (0, 1, ...): the same in a gateway
    # restarted after a crash, so the send's nonce is too (``seq`` counts the channel's).
    nth: int = 0
    shown: str = ""
    buttons: tuple[Button, ...] = ()
    shown_buttons: tuple[Button, ...] = ()
    clear_components: bool = False  # a dismissed prompt: drop its buttons and menu
    last_touch: float = -math.inf
    send_due: float = math.inf  # not sent yet: when it is sent at the latest


@dataclass(eq=False)
class Output:
    key: str
    mode: str  # stream | preview | card | block | prompt | reply | seeded
    messages: list[Message] = field(default_factory=list)
    last_seq: int = -1
    made: int = 0  # messages ever made (``Message.nth`` of the next)
    sealed: bool = False
    failed: bool = False
    chunker: MessageChunker | None = None  # stream
    live: Message | None = None  # stream: the message showing the open part
    text: str = ""  # card/block/prompt: the raw text; preview: the tail of the thinking
    truncated: bool = False  # preview: the tail lost its beginning
    opened_at: float = 0.0  # stream: when it opened or last sent a paragraph (no edits)
    # footer: the answer's message it rides in, and that message's text without it
    host: Message | None = None
    host_text: str = ""
    shared: bool = False  # seeded: its message was known for another key first (a host)
    done: bool = False  # card: its result came (it changes no more: it may share a message)

    def ids(self) -> tuple[str, ...]:
        return tuple(m.id for m in self.messages if m.id is not None)

    def wanted(self, message: Message, *, whole_lines: bool) -> str:
        """What ``message`` should show now: its final text, else the stream's open part."""
        if message.final is not None:
            return message.final
        if self.chunker is None:
            return message.shown
        return self.chunker.live_text(whole_lines=whole_lines)

    def rendered_texts(
        self, budget: int, *, wrap_links: bool, unit: LengthUnit = "chars"
    ) -> list[str]:
        """The whole wanted content of a non-streamed output, message by message."""
        if self.mode == "preview":
            text = thinking_preview(
                self.text, truncated=self.truncated, width=THINKING_PREVIEW_CHARS
            )
            text = wrap_bare_links(text) if wrap_links else text
            return [text] if text else []
        if self.mode == "card":
            text = fit_message(render_tool_card(self.text), budget, wrap_links=False, unit=unit)
            return [text] if text else []
        return split_message(self.text, budget, wrap_links=wrap_links, unit=unit)


class OutputBook:
    """The outputs of one channel by key; see the module docstring."""

    def __init__(self) -> None:
        self._outputs: dict[str, Output] = {}
        self._seq = 0
        self._unreported: dict[str, list[str]] = {}  # posted ids not yet handed out

    def __len__(self) -> int:
        return len(self._outputs)

    def get(self, key: str) -> Output | None:
        return self._outputs.get(key)

    def add(self, out: Output) -> Output:
        self._outputs[out.key] = out
        return out

    def admit(self, key: str, tally: RenderTally, busy: Callable[[], Collection[Output]]) -> bool:
        """Whether ``key`` is new (a repeat is counted). Makes room when the book is full;
        ``busy`` names the outputs with sends or edits still to make, which are kept."""
        if key in self._outputs:
            tally.duplicate_posts += 1
            return False
        if len(self._outputs) >= MAX_KEPT_OUTPUTS:
            self._forget_oldest(busy())
        return True

    def _forget_oldest(self, busy: Collection[Output]) -> None:
        """Bound the memory of a long-lived thread: forget the older half of the finished
        outputs (amortized O(1) per output)."""
        busy_ids = {id(out) for out in busy}
        for key in list(self._outputs)[: MAX_KEPT_OUTPUTS // 2]:
            out = self._outputs[key]
            waiting_prompt = out.mode == "prompt" and any(m.buttons for m in out.messages)
            if out.sealed and id(out) not in busy_ids and not waiting_prompt:
                del self._outputs[key]

    def known(self, key: str, message_ids: tuple[str, ...] | list[str]) -> None:
        """Seed an output posted before a restart (from the log): never posted again.
        Called once per logged ``OutputPosted``; the ids of one key accumulate."""
        out = self._outputs.get(key)
        if out is None:
            out = self._outputs[key] = Output(key, "seeded", sealed=True)
        have = set(out.ids())
        for message_id in message_ids:
            if message_id not in have and not out.shared and self._shown_by_other(message_id):
                out.shared = True  # a footer that rode in the answer's last message
            if message_id not in have:
                out.messages.append(Message(self._next_seq(), id=message_id, nth=out.made))
                out.made += 1

    def _shown_by_other(self, message_id: str) -> bool:
        """Whether a message of that id is known for some key already (only a footer that
        rode in an answer's message shares it): the last few outputs are enough."""
        for n, out in enumerate(reversed(self._outputs.values())):
            if n >= 8:
                return False
            if any(m.id == message_id for m in out.messages):
                return True
        return False

    def message_ids(self, key: str) -> tuple[str, ...]:
        out = self._outputs.get(key)
        return out.ids() if out is not None else ()

    def new_message(self, out: Output, final: str | None) -> Message:
        """A message appended to ``out``, numbered after every message made before it."""
        message = Message(self._next_seq(), final=final, nth=out.made)
        out.made += 1
        out.messages.append(message)
        return message

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def record_posted(self, key: str, message_id: str) -> None:
        self._unreported.setdefault(key, []).append(message_id)

    def take_posted(self) -> list[Posted]:
        """The ids posted since the last call, by key (each id is handed out once)."""
        posted = [(key, tuple(ids)) for key, ids in self._unreported.items()]
        self._unreported = {}
        return posted

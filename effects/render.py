"""The stream renderer: a thread's chat effects -> calls on a ``ChatPlatform``.

One ``StreamRenderer`` per chat channel (thread). The reactor hands it the chat effects of
``runtime.core.effect_types`` in commit order; it answers with the ``(key, message ids)``
of outputs it posted so the reactor can report ``OutputPosted``. What it keeps:

- **Posted once.** It holds ``key -> message ids``; a key already posted (or seeded from
  the log with ``known``) is never posted again. Appends are idempotent by ``seq``.
- **Paced.** A message is edited at most once per ``limits.min_edit_interval_s``; deltas
  arriving faster only change what the next edit shows. A new streamed message, tool card
  or thinking preview is sent one interval after it opens, or at once when it is complete
  (so a quick tool is one send, not a send and an edit). Sends and edits not due yet are
  made by the renderer's background task (``run``/``async with``); messages keep their
  creation order in the channel.
- **In order, nothing lost.** Every platform call goes through one lock and one retry loop
  (``_call``): a 429 waits its ``retry_after``, a 5xx or disconnect is retried with a
  bounded backoff, a send carries a nonce derived from its key so a retried send whose
  answer was lost is not doubled. A call that still fails raises ``RenderError`` from
  ``apply``, which the reactor turns into ``EffectFailed``; one made by the background task
  goes to ``on_error`` (or the log), never to a later, innocent effect.
- **Linear.** Streamed text goes through a ``MessageChunker`` (``effects.chunking``): closed
  messages are final and forgotten, only the open message (at most one message long) is
  re-rendered per edit, and edits are paced, so a 10x longer answer costs about 10x.

Presentation (Discord markdown, which the console shows as well): streamed text split at
the char limit with fences repaired and bare links wrapped; thinking as a one-line subtext
preview of its last characters; a tool call as one compact card (``🔧 name(args)``, a
truncated result in a code block, an error marker); footer, notice and marker as given;
permission prompts with Accept/Deny buttons; questions with a select menu.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import trio

from threadspindle.effects.chunking import (
    THINKING_PREVIEW_CHARS,
    MessageChunker,
    fit_message,
    is_blank,
    parse_component_action,
    permission_action,
    permission_text,
    question_menu_id,
    question_text,
    render_tool_card,
    split_message,
    thinking_preview,
    wrap_bare_links,
)
from threadspindle.effects.platform import ChatPlatform, PlatformError, SelectMenu
from threadspindle.runtime.core.effect_types import (
    AppendOutput,
    Button,
    DismissPrompt,
    EditOutput,
    PostOutput,
    ReplyToCommand,
    SealOutput,
    ShowPermissionPrompt,
    ShowQuestion,
    Typing,
)
from threadspindle.runtime.core.frozen import Frozen

__all__ = [
    "CHAT_EFFECTS",
    "Posted",
    "RenderError",
    "RendererStatistics",
    "StreamRenderer",
    "parse_component_action",
    "permission_action",
    "question_menu_id",
    "render_tool_card",
]

CHAT_EFFECTS = (
    PostOutput,
    AppendOutput,
    EditOutput,
    SealOutput,
    Typing,
    ShowPermissionPrompt,
    ShowQuestion,
    DismissPrompt,
    ReplyToCommand,
)

Posted = tuple[str, tuple[str, ...]]

logger = logging.getLogger("spindle.render")

MAX_KEPT_OUTPUTS = 4096  # keys remembered; the core never repeats a key that old
MAX_RATE_LIMIT_WAITS = 8
MAX_SERVER_RETRIES = 5


# --- state -----------------------------------------------------------------------------------


class RenderError(Exception):
    """A platform call failed for good; ``key`` is the output it was for."""

    def __init__(self, message: str, *, key: str | None = None, effect: str | None = None):
        super().__init__(message)
        self.key = key
        self.effect = effect


class RendererStatistics(Frozen):
    sends: int = 0
    edits: int = 0
    deletes: int = 0
    typing_calls: int = 0
    replies: int = 0
    retries: int = 0  # platform calls repeated after a 429 or a retryable error
    rate_limited: int = 0  # of which 429s
    failures: int = 0  # calls given up on (typing failures included)
    ignored_appends: int = 0  # duplicate or stale ``seq``, or an unknown key
    duplicate_posts: int = 0  # a key already posted
    blank_skipped: int = 0  # whitespace-only messages never sent
    outputs: int = 0  # keys known
    dirty_messages: int = 0  # messages waiting for their paced send or edit


@dataclass(eq=False)
class _Message:
    """One platform message of an output. ``final`` None: it shows the output's open part."""

    seq: int
    id: str | None = None
    final: str | None = None
    shown: str = ""
    buttons: tuple[Button, ...] = ()
    shown_buttons: tuple[Button, ...] = ()
    clear_components: bool = False  # a dismissed prompt: drop its buttons and menu
    last_touch: float = -math.inf
    send_due: float = math.inf  # not sent yet: when it is sent at the latest


@dataclass(eq=False)
class _Output:
    key: str
    mode: str  # stream | preview | card | block | prompt | reply | seeded
    messages: list[_Message] = field(default_factory=list)
    last_seq: int = -1
    sealed: bool = False
    failed: bool = False
    chunker: MessageChunker | None = None  # stream
    live: _Message | None = None  # stream: the message showing the open part
    text: str = ""  # card/block/prompt: the raw text; preview: the tail of the thinking
    truncated: bool = False  # preview: the tail lost its beginning

    def ids(self) -> tuple[str, ...]:
        return tuple(m.id for m in self.messages if m.id is not None)


class StreamRenderer:
    """Applies chat effects to one channel of a platform; see the module docstring.

    Run its background task with ``async with renderer:`` or ``nursery.start(renderer.run)``
    (without it, edits that were not due yet wait for the next ``apply`` or ``flush``), and
    ``await aclose()`` before dropping it so the last paced edits are made. ``clock`` must
    tell trio's time (it is compared with trio deadlines); it is a parameter for tests."""

    def __init__(
        self,
        platform: ChatPlatform,
        channel_id: str,
        *,
        clock: Callable[[], float] = trio.current_time,
        on_posted: Callable[[str, tuple[str, ...]], None] | None = None,
        on_error: Callable[[RenderError], None] | None = None,
        typing_after_post_s: float = 1.0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        wrap_links: bool | None = None,
        close_live_fences: bool | None = None,
    ) -> None:
        self.platform = platform
        self.channel_id = channel_id
        self.limits = platform.limits
        self._clock = clock
        self.on_posted = on_posted
        self._budget = self.limits.char_limit - self.limits.split_margin
        # A terminal that only appends (the plain console) needs text that only grows by
        # whole lines: no temporary fence closers, no rewritten links, no half lines.
        append_only = platform.streams_append_only
        self._append_only = append_only
        self._wrap_links = not append_only if wrap_links is None else wrap_links
        self._close_live = not append_only if close_live_fences is None else close_live_fences
        self._typing_after_post_s = typing_after_post_s
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._outputs: dict[str, _Output] = {}
        self._dirty: dict[_Message, _Output] = {}  # sent messages waiting for a paced edit
        self._unsent: dict[_Message, _Output] = {}  # new messages waiting to be sent
        self._lock = trio.Lock()
        self._wake = trio.Event()
        self._seq = 0
        self._unreported: dict[str, list[str]] = {}  # posted ids not yet handed out
        self._typing_on = False
        self._typing_due = math.inf
        self._on_error = on_error
        self.last_error: RenderError | None = None  # the last failure of the background task
        self._nursery: trio.Nursery | None = None
        self._stats: dict[str, int] = dict.fromkeys(RendererStatistics.model_fields, 0)

    # -- lifetime ---------------------------------------------------------------------------

    async def __aenter__(self) -> StreamRenderer:
        self._nursery_manager = trio.open_nursery()
        nursery = await self._nursery_manager.__aenter__()
        await nursery.start(self.run)
        self._nursery = nursery
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            if exc is None:
                await self.aclose()
        finally:
            assert self._nursery is not None
            self._nursery.cancel_scope.cancel()
            self._nursery = None
            await self._nursery_manager.__aexit__(exc_type, exc, tb)
        return None

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """The background task: makes paced edits and typing refreshes when they fall due."""
        task_status.started()
        while True:
            self._wake = trio.Event()
            deadline = self._next_deadline()
            with trio.move_on_at(deadline):
                await self._wake.wait()
            async with self._lock:
                try:
                    await self._flush_due()
                except RenderError as error:
                    self._background_failed(error)
                except Exception as error:  # a platform that broke its contract
                    # Never take the owner's nursery (all its threads) down: report it.
                    self._count("failures")
                    message = f"chat platform failed: {type(error).__name__}: {error}"
                    self._background_failed(RenderError(message))
                self._report_background_posts()

    async def flush(self) -> list[Posted]:
        """Send and edit everything outstanding, waiting for each message's pacing interval;
        returns what was posted since the last report (as ``apply`` does)."""
        while True:
            async with self._lock:
                await self._flush_due()
                deadline = self._next_deadline(typing=False)
            if deadline == math.inf:
                break
            await trio.sleep_until(deadline)
        return self._take_posted()

    async def aclose(self) -> list[Posted]:
        """Flush (typing off); the renderer keeps its keys, a later ``apply`` still works."""
        self._typing_on = False
        return await self.flush()

    # -- the interface -----------------------------------------------------------------------

    def known(self, key: str, message_ids: tuple[str, ...] | list[str]) -> None:
        """Seed an output posted before a restart (from the log): never posted again.
        Called once per logged ``OutputPosted``; the ids of one key accumulate."""
        out = self._outputs.get(key)
        if out is None:
            out = self._outputs[key] = _Output(key, "seeded", sealed=True)
        have = set(out.ids())
        for message_id in message_ids:
            if message_id not in have:
                out.messages.append(_Message(self._next_seq(), id=message_id))

    def message_ids(self, key: str) -> tuple[str, ...]:
        out = self._outputs.get(key)
        return out.ids() if out is not None else ()

    def statistics(self) -> RendererStatistics:
        return RendererStatistics(
            **{
                **self._stats,
                "outputs": len(self._outputs),
                "dirty_messages": len(self._dirty) + len(self._unsent),
            }
        )

    async def apply(self, effect: Any) -> list[Posted]:
        """Apply one chat effect; returns ``(key, new message ids)`` for the messages posted
        since the last report: by this call, and by the background task when there is no
        ``on_posted`` (a first message waits one pacing interval, so it is often reported
        with the next effect). Each id is reported once, so the log stays linear; ``known``
        merges a key's reports back. Raises ``RenderError`` when the platform refused for
        good, ``TypeError`` for an effect that is not a chat effect."""
        if not isinstance(effect, CHAT_EFFECTS):
            raise TypeError(f"not a chat effect: {type(effect).__name__}")
        async with self._lock:
            try:
                await self._apply(effect)
                await self._flush_due()
            except RenderError as error:
                error.effect = effect.type
                raise
            finally:
                self._wake.set()
            return self._take_posted()

    # -- effects ------------------------------------------------------------------------------

    async def _apply(self, effect: Any) -> None:
        if isinstance(effect, Typing):
            await self._apply_typing(effect.on)
        elif isinstance(effect, PostOutput):
            if self._is_new(effect.key):
                await self._post_output(effect)
        elif isinstance(effect, AppendOutput):
            out = self._outputs.get(effect.key)
            if out is None or effect.seq <= out.last_seq or out.sealed or out.failed:
                self._count("ignored_appends")
                return
            out.last_seq = effect.seq
            await self._append(out, effect.text)
        elif isinstance(effect, EditOutput):
            await self._edit_output(effect)
        elif isinstance(effect, SealOutput):
            out = self._outputs.get(effect.key)
            if out is not None and not out.sealed and not out.failed:
                await self._seal(out)
        elif isinstance(effect, ShowPermissionPrompt | ShowQuestion):
            if self._is_new(effect.key):
                await self._show_prompt(effect)
        elif isinstance(effect, DismissPrompt):
            await self._dismiss(effect)
        elif isinstance(effect, ReplyToCommand):
            if self._is_new(effect.key):
                await self._reply(effect)

    def _is_new(self, key: str) -> bool:
        if key in self._outputs:
            self._count("duplicate_posts")
            return False
        if len(self._outputs) >= MAX_KEPT_OUTPUTS:
            self._forget_oldest()
        return True

    def _forget_oldest(self) -> None:
        """Bound the memory of a long-lived thread: forget the older half of the finished
        outputs (amortized O(1) per output)."""
        busy = {id(out) for out in (*self._dirty.values(), *self._unsent.values())}
        for key in list(self._outputs)[: MAX_KEPT_OUTPUTS // 2]:
            out = self._outputs[key]
            waiting_prompt = out.mode == "prompt" and any(m.buttons for m in out.messages)
            if out.sealed and id(out) not in busy and not waiting_prompt:
                del self._outputs[key]

    async def _post_output(self, effect: PostOutput) -> None:
        if effect.kind == "text":
            out = self._outputs[effect.key] = _Output(effect.key, "stream")
            out.chunker = MessageChunker(
                self._budget, wrap_links=self._wrap_links, close_live_fence=self._close_live
            )
            await self._append(out, effect.text)
        elif effect.kind == "thinking":
            out = self._outputs[effect.key] = _Output(effect.key, "preview")
            await self._append(out, effect.text)
        elif effect.kind == "tool":
            # Sent when its result comes, or after one pacing interval: a quick tool costs
            # one call, a slow one shows its header while it works.
            out = self._outputs[effect.key] = _Output(effect.key, "card", text=effect.text)
            await self._show(out, now=False)
        else:  # footer, notice, marker: as given
            out = self._outputs[effect.key] = _Output(
                effect.key, "block", text=effect.text, sealed=True
            )
            await self._show(out, now=True)

    async def _append(self, out: _Output, text: str) -> None:
        if out.mode == "stream":
            assert out.chunker is not None
            out.chunker.feed(text)
            await self._pump_stream(out)
        elif out.mode == "preview":
            out.text += text
            keep = 4 * THINKING_PREVIEW_CHARS  # whitespace is collapsed later: keep some spare
            if len(out.text) > keep:
                out.text, out.truncated = out.text[-keep:], True
            if self.limits.supports_edit and not self._append_only:
                await self._show(out, now=False)  # append-only displays: at the seal
        else:
            out.text += text
            await self._show(out, now=True)

    async def _seal(self, out: _Output) -> None:
        out.sealed = True
        if out.mode == "stream":
            assert out.chunker is not None
            out.chunker.finish()
            await self._pump_stream(out)
            out.chunker = None  # its text is in the messages now
        elif out.mode == "preview":
            await self._show(out, now=True)
        await self._settle(out)

    async def _settle(self, out: _Output) -> None:
        """Make a sealed output's outstanding sends and edits now, waiting out their pacing:
        whatever the chat shows after it (the footer, the next tool card) must come after
        its final text, not before its last paced edit."""
        for message in sorted(
            (m for m, o in self._unsent.items() if o is out), key=lambda m: m.seq
        ):
            if message in self._unsent:
                await self._send(out, message)
        while pending := sorted(
            (m for m, o in self._dirty.items() if o is out), key=lambda m: m.seq
        ):
            message = pending[0]
            await trio.sleep_until(self._due(message))
            if message in self._dirty:
                await self._edit(self._dirty.pop(message), message)

    async def _edit_output(self, effect: EditOutput) -> None:
        out = self._outputs.get(effect.key)
        if out is None:
            self._count("ignored_appends")
            return
        if out.mode in ("stream", "preview", "seeded"):
            if out.mode == "stream" and out.chunker is not None:
                out.chunker.finish()
                out.chunker = None
            out.live = None
            out.mode = "block" if out.mode != "seeded" or len(out.messages) != 1 else "card"
        out.text = effect.text
        await self._show(out, now=True)

    async def _show_prompt(self, effect: ShowPermissionPrompt | ShowQuestion) -> None:
        out = self._outputs[effect.key] = _Output(effect.key, "prompt", sealed=True)
        menu: SelectMenu | None = None
        buttons: tuple[Button, ...] = ()
        if isinstance(effect, ShowPermissionPrompt):
            out.text = permission_text(effect.tool, effect.detail)
            buttons = (
                Button(label="Accept", action=permission_action(effect.request_id, True)),
                Button(label="Deny", action=permission_action(effect.request_id, False)),
            )
        else:
            out.text = question_text(
                effect.question, has_options=bool(effect.options), multiple=effect.multiple
            )
            if effect.options:
                menu = SelectMenu(
                    custom_id=question_menu_id(effect.request_id),
                    options=effect.options,
                    multiple=effect.multiple,
                )
        text = fit_message(out.text, self._budget, wrap_links=self._wrap_links)
        message = self._new_message(out, text)
        message.buttons = buttons
        await self._send(out, message, menu=menu)

    async def _dismiss(self, effect: DismissPrompt) -> None:
        out = self._outputs.get(effect.key)
        if out is None or not out.messages:
            self._count("ignored_appends")
            return
        base = out.text or "🔐 Request"
        out.text = base + f"\n-# {effect.outcome}"
        message = out.messages[0]
        message.final = fit_message(out.text, self._budget, wrap_links=self._wrap_links)
        message.buttons = ()  # no more answers
        message.clear_components = True
        self._mark_dirty(out, message)
        # Now, not at the next paced flush: what the chat shows after the dismissal (the
        # next run's answer and footer) must not appear while the buttons are still there.
        await self._settle(out)

    async def _reply(self, effect: ReplyToCommand) -> None:
        out = self._outputs[effect.key] = _Output(effect.key, "reply", text=effect.text)
        out.sealed = True
        text = fit_message(effect.text, self._budget, wrap_links=self._wrap_links) or "…"
        message = self._new_message(out, text)
        await self._send_earlier(message)

        async def reply() -> str:
            return await self.platform.reply(
                self.channel_id,
                effect.action_id,
                text,
                ephemeral=effect.ephemeral,
                buttons=effect.buttons,
            )

        message.id = await self._call(reply, key=out.key, out=out)
        message.shown, message.buttons = text, effect.buttons
        message.shown_buttons = effect.buttons
        message.last_touch = self._clock()
        self._count("replies")
        self._posted(out, message.id)

    async def _apply_typing(self, on: bool) -> None:
        if not on:
            self._typing_on = False
            self._typing_due = math.inf
            return
        if not self._typing_on:
            self._typing_on = True
            await self._type()

    # -- outputs -> messages -------------------------------------------------------------------

    def _rendered_texts(self, out: _Output) -> list[str]:
        """The whole wanted content of a non-streamed output, message by message."""
        if out.mode == "preview":
            text = thinking_preview(out.text, truncated=out.truncated, width=THINKING_PREVIEW_CHARS)
            text = wrap_bare_links(text) if self._wrap_links else text
            return [text] if text else []
        if out.mode == "card":
            text = fit_message(render_tool_card(out.text), self._budget, wrap_links=False)
            return [text] if text else []
        return split_message(out.text, self._budget, wrap_links=self._wrap_links)

    async def _show(self, out: _Output, *, now: bool) -> None:
        """Bring a non-streamed output's messages to its wanted texts: edit (paced) the
        ones that were sent, send the missing ones (``now``, or after one pacing interval,
        so that a text changing at once costs one call), delete the surplus."""
        texts = self._rendered_texts(out)
        for index, text in enumerate(texts):
            if index < len(out.messages):
                message = out.messages[index]
                message.final = text
                if message.id is not None:
                    self._mark_dirty(out, message)
                elif now and message in self._unsent:
                    await self._send(out, message)
            else:
                await self._post(out, self._new_message(out, text), now=now)
        for message in out.messages[len(texts) :]:
            await self._delete(out, message)
        del out.messages[len(texts) :]

    async def _pump_stream(self, out: _Output) -> None:
        """Hand the chunker's finished messages and its open one to the platform."""
        assert out.chunker is not None
        for text in out.chunker.take_closed():
            if out.live is not None and is_blank(text):
                # It showed the start of a line that moved on to the next message.
                moved_on, out.live = out.live, None
                out.messages.remove(moved_on)
                await self._delete(out, moved_on)
                self._count("blank_skipped")
            elif out.live is not None:
                live, out.live = out.live, None
                live.final = text
                if live.id is None:
                    await self._send(out, live)  # final already: no reason to wait
                else:
                    self._mark_dirty(out, live)
            elif is_blank(text):
                self._count("blank_skipped")
            else:
                await self._send(out, self._new_message(out, text))
        if out.chunker.finished or not self.limits.supports_edit:
            return  # a platform without edits gets each message once, when it is final
        if out.live is not None:
            if out.live.id is not None:
                self._mark_dirty(out, out.live)
            return
        if not is_blank(out.chunker.live_text(whole_lines=self._append_only)):
            # The first message of a stream waits one pacing interval: what streams in by
            # then is in its first send instead of an edit right after it.
            out.live = self._new_message(out, None)
            await self._post(out, out.live, now=False)

    def _new_message(self, out: _Output, final: str | None) -> _Message:
        message = _Message(self._next_seq(), final=final)
        out.messages.append(message)
        return message

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _wanted(self, out: _Output, message: _Message) -> str:
        if message.final is not None:
            return message.final
        if out.chunker is None:
            return message.shown
        return out.chunker.live_text(whole_lines=self._append_only)

    def _mark_dirty(self, out: _Output, message: _Message) -> None:
        self._dirty[message] = out

    def _due(self, message: _Message) -> float:
        return message.last_touch + self.limits.min_edit_interval_s

    def _next_deadline(self, *, typing: bool = True) -> float:
        due = min((self._due(m) for m in self._dirty), default=math.inf)
        due = min(due, min((m.send_due for m in self._unsent), default=math.inf))
        return min(due, self._typing_due if typing and self._typing_on else math.inf)

    async def _flush_due(self) -> None:
        """Send the new messages and make the edits that fell due, and a typing refresh."""
        now = self._clock()
        for message in sorted(self._unsent, key=lambda m: m.seq):
            if message.send_due <= now and message in self._unsent:
                await self._send(self._unsent[message], message)
        for message in sorted(self._dirty, key=lambda m: m.seq):
            if self._due(message) <= now:
                await self._edit(self._dirty.pop(message), message)
        if self._typing_on and self._typing_due <= now:
            await self._type()

    # -- platform calls -----------------------------------------------------------------------

    async def _post(self, out: _Output, message: _Message, *, now: bool) -> None:
        """A new message: sent now, or queued to be sent one pacing interval from now."""
        if now:
            await self._send(out, message)
        else:
            message.send_due = self._clock() + self.limits.min_edit_interval_s
            self._unsent[message] = out

    async def _send_earlier(self, message: _Message) -> None:
        """Channel order is creation order: send the waiting messages made before it."""
        for earlier in sorted(self._unsent, key=lambda m: m.seq):
            if earlier.seq < message.seq and earlier in self._unsent:
                await self._send(self._unsent[earlier], earlier)

    async def _send(
        self, out: _Output, message: _Message, *, menu: SelectMenu | None = None
    ) -> None:
        self._unsent.pop(message, None)
        await self._send_earlier(message)
        text = self._wanted(out, message)
        if is_blank(text):
            self._count("blank_skipped")
            if message in out.messages:
                out.messages.remove(message)
            return
        if self._append_only:
            # An append-only display shows a late edit below newer messages: make the
            # edits still waiting first, so the transcript reads in order.
            for waiting in sorted(self._dirty, key=lambda m: m.seq):
                await self._edit(self._dirty.pop(waiting), waiting)
        nonce = hashlib.blake2b(
            f"{self.channel_id}/{out.key}#{message.seq}".encode(), digest_size=12
        ).hexdigest()

        async def send() -> str:
            return await self.platform.send(
                self.channel_id, text, buttons=message.buttons, menu=menu, nonce=nonce
            )

        message.id = await self._call(send, key=out.key, out=out)
        message.shown, message.shown_buttons = text, message.buttons
        message.last_touch = self._clock()
        self._count("sends")
        self._posted(out, message.id)

    async def _edit(self, out: _Output, message: _Message) -> None:
        text = self._wanted(out, message)
        if message.id is None or out.failed:
            return
        components_changed = message.clear_components or message.buttons != message.shown_buttons
        if text == message.shown and not components_changed:
            return
        if is_blank(text):
            self._count("blank_skipped")
            return
        if not self.limits.supports_edit:
            # No edits: the new text arrives as a new message.
            await self._send(out, self._new_message(out, text))
            return
        buttons = message.buttons if components_changed else None

        async def edit() -> None:
            await self.platform.edit(self.channel_id, message.id or "", text, buttons=buttons)

        await self._call(edit, key=out.key, out=out)
        message.shown, message.shown_buttons = text, message.buttons
        message.clear_components = False
        message.last_touch = self._clock()
        self._count("edits")

    async def _delete(self, out: _Output, message: _Message) -> None:
        self._dirty.pop(message, None)
        if message.id is None:
            self._unsent.pop(message, None)  # never sent: nothing to delete
            return

        async def delete() -> None:
            await self.platform.delete(self.channel_id, message.id or "")

        await self._call(delete, key=out.key, out=out)
        self._count("deletes")

    async def _type(self) -> None:
        """Show typing once. A failure is counted, not raised: typing is cosmetic."""
        now = self._clock()
        self._typing_due = now + self.limits.typing_refresh_s
        try:
            await self.platform.typing(self.channel_id)
            self._count("typing_calls")
        except PlatformError:
            self._count("failures")

    def _posted(self, out: _Output, message_id: str) -> None:
        self._unreported.setdefault(out.key, []).append(message_id)
        if self._typing_on:
            # Posting ends the typing indicator on Discord: show it again soon after.
            self._typing_due = min(self._typing_due, self._clock() + self._typing_after_post_s)

    async def _call(
        self, call: Callable[[], Awaitable[Any]], *, key: str, out: _Output | None = None
    ) -> Any:
        """One platform call with the retry policy; RenderError when it fails for good."""
        waits = retries = 0
        while True:
            try:
                return await call()
            except PlatformError as error:
                if error.retry_after is not None and waits < MAX_RATE_LIMIT_WAITS:
                    waits += 1
                    self._count("rate_limited")
                    self._count("retries")
                    await trio.sleep(max(error.retry_after, 0.0))
                    continue
                if error.retryable and retries < MAX_SERVER_RETRIES:
                    self._count("retries")
                    await trio.sleep(min(self._backoff_s * 2**retries, self._max_backoff_s))
                    retries += 1
                    continue
                self._count("failures")
                if out is not None:
                    out.failed = True  # stop feeding an output the platform refuses
                raise RenderError(
                    f"chat platform refused output {key!r}: {error}", key=key
                ) from error

    def _take_posted(self) -> list[Posted]:
        posted = [(key, tuple(ids)) for key, ids in self._unreported.items()]
        self._unreported = {}
        return posted

    def _report_background_posts(self) -> None:
        """Posts made by the background task go to ``on_posted`` when there is one, else
        out with the next ``apply``/``flush``."""
        if self.on_posted is not None:
            for key, ids in self._take_posted():
                self.on_posted(key, ids)

    def _background_failed(self, error: RenderError) -> None:
        """A paced send/edit failed for good in the background, where no effect is being
        applied: it goes to ``on_error``, else to the log (the effect that caused it was
        already reported as applied, and a later effect must not fail for it)."""
        self.last_error = error
        if self._on_error is not None:
            self._on_error(error)
        else:
            logger.warning("channel=%s %s", self.channel_id, error)

    def _count(self, name: str) -> None:
        self._stats[name] += 1

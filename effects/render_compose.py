"""Composing outputs: what each chat effect does to its output's messages.

``OutputComposer`` is the presentation half of the stream renderer. For each chat effect
(``Typing`` aside) it changes the output's bookkeeping (``effects.render_outputs``) and
hands the messages to pace (``effects.render_pacing``):

- **Streamed text** (``PostOutput(kind="text")`` + appends) goes through a
  ``MessageChunker``: each closed message is sent (or its open message's edit marked) once,
  only the open message is re-rendered, and the first message of a stream waits one
  pacing interval so what streams in by then is in its first send.
- **Thinking** is a one-line subtext preview of its last characters, edited as it grows
  (an append-only display gets it once, at the seal).
- **A tool call** is one compact card: sent when its result comes (an ``EditOutput``) or
  one interval after it opened, so a quick tool is one send.
- **Footer, notice, marker** are sent as given; an ``EditOutput`` re-splits an output and
  deletes the messages it no longer needs.
- **Prompts** carry Accept/Deny buttons (permission) or a select menu (question); a
  dismissal edits them at once, buttons gone, before anything posted after it.
- **Replies** answer the command that asked, in channel order.
- **Sealing** an output makes its last sends and edits before anything after it. A
  streamed answer's seal waits for the next effect (``settle_pending``): when that is the
  run's footer and the connection's request budget is at its limit (``merge_footers``),
  the footer rides in the answer's last message (a ``-# `` line under it) and the one
  final edit shows both; one request a run less when every request counts. Otherwise,
  and when it would not fit, the footer is a message of its own.

Keys are admitted once (``OutputBook.admit``); appends are taken in ``seq`` order only,
never after the seal or a failure. No platform call is made here but through the pacing.
"""

from __future__ import annotations

from collections.abc import Callable

from threadspindle.effects.chunking import (
    THINKING_PREVIEW_CHARS,
    MessageChunker,
    fit_message,
    is_blank,
    permission_action,
    permission_text,
    question_menu_id,
    question_text,
    text_length,
)
from threadspindle.effects.platform import PlatformLimits, SelectMenu
from threadspindle.effects.render_outputs import Output, OutputBook, RenderTally
from threadspindle.effects.render_pacing import PacedDelivery, RenderError
from threadspindle.effects.request_budget import Priority
from threadspindle.runtime.core.effect_types import (
    AppendOutput,
    Button,
    DismissPrompt,
    EditOutput,
    PostFile,
    PostOutput,
    ReplyToCommand,
    SealOutput,
    ShowPermissionPrompt,
    ShowQuestion,
)

__all__ = ["OutputComposer", "OutputEffect"]

OutputEffect = (
    PostOutput
    | PostFile
    | AppendOutput
    | EditOutput
    | SealOutput
    | ShowPermissionPrompt
    | ShowQuestion
    | DismissPrompt
    | ReplyToCommand
)


class OutputComposer:
    """The outputs of one channel, composed effect by effect; see the module docstring.

    ``append_only``: the display only appends (the plain console): streamed text is shown by
    whole lines and thinking once. ``wrap_links``/``close_live_fences``: wrap bare links in
    ``<>``, close an open fence in the live message (both off on an append-only display).
    ``clock``: on a platform without edits, streamed text is also sent at paragraph ends,
    at most once per ``limits.min_edit_interval_s`` (without a clock: only when full)."""

    def __init__(
        self,
        book: OutputBook,
        delivery: PacedDelivery,
        tally: RenderTally,
        limits: PlatformLimits,
        *,
        append_only: bool,
        wrap_links: bool,
        close_live_fences: bool,
        clock: Callable[[], float] | None = None,
        merge_footers: Callable[[], bool] | None = None,
        on_late_error: Callable[[RenderError], None] | None = None,
    ) -> None:
        self._book = book
        self._clock = clock
        self._interval = limits.min_edit_interval_s
        self._delivery = delivery
        self._tally = tally
        self._budget = limits.char_limit - limits.split_margin
        self._unit = limits.length_unit  # how the platform counts the budget
        self._option_chars = limits.option_chars
        self._menu_options = limits.menu_options
        self._supports_edit = limits.supports_edit
        self._append_only = append_only
        self._wrap_links = wrap_links
        self._close_live = close_live_fences
        # Whether a footer should ride in the answer's last message now (the budget is
        # short); None: never (no edits, an append-only display, no budget).
        self._merge_footers = merge_footers if limits.supports_edit and not append_only else None
        self._on_late_error = on_late_error
        self._unsettled: Output | None = None  # a sealed stream whose last calls wait

    @property
    def unsettled(self) -> str | None:
        """The key of a sealed stream whose last calls wait for the next effect."""
        return self._unsettled.key if self._unsettled is not None else None

    async def settle_pending(self) -> None:
        """Make the last calls of a sealed stream whose settle waited for the next effect.
        Its failure is reported to ``on_late_error`` (the seal was applied already; the
        effect being applied now is not to fail for it), else raised."""
        out, self._unsettled = self._unsettled, None
        if out is None:
            return
        try:
            await self._delivery.settle(out, final_edits=True)
        except RenderError as error:
            if self._on_late_error is None:
                raise
            self._on_late_error(error)

    async def apply(self, effect: OutputEffect) -> None:
        """Apply one chat effect (any but ``Typing``) to its output's messages."""
        if self._unsettled is not None:
            if isinstance(effect, PostOutput) and effect.kind == "footer":
                if not self._is_new(effect.key):
                    await self.settle_pending()
                elif not await self._merge_footer(effect):
                    await self.settle_pending()
                    await self._post_output(effect)
                return
            await self.settle_pending()
        if isinstance(effect, PostOutput):
            if self._is_new(effect.key):
                await self._post_output(effect)
        elif isinstance(effect, AppendOutput):
            out = self._appended_to(effect)
            if out is not None:
                await self._append(out, effect.text)
        elif isinstance(effect, EditOutput):
            await self._edit_output(effect)
        elif isinstance(effect, SealOutput):
            out = self._book.get(effect.key)
            if out is not None and not out.sealed and not out.failed:
                await self._seal(out, defer=self._merge_footers is not None)
        elif isinstance(effect, ShowPermissionPrompt | ShowQuestion):
            if self._is_new(effect.key):
                await self._show_prompt(effect)
        elif isinstance(effect, DismissPrompt):
            await self._dismiss(effect)
        elif isinstance(effect, ReplyToCommand):
            if self._is_new(effect.key):
                await self._reply(effect)
        elif isinstance(effect, PostFile):
            if self._is_new(effect.key):
                await self._post_file(effect)

    def append_nowait(self, effect: AppendOutput) -> bool:
        """Apply an append the way ``apply`` would, when that takes no platform call: the
        text goes on in a streamed message already posted, closing none (``fits``), and no
        sealed stream waits to be settled. False (and nothing done) otherwise."""
        if self._unsettled is not None:
            return False
        out = self._book.get(effect.key)
        if out is None or self._ignored(out, effect):
            self._tally.ignored_appends += 1
            return True
        live, chunker = out.live, out.chunker
        if (
            out.mode != "stream"
            or not self._supports_edit
            or live is None
            or live.id is None
            or chunker is None
            or not chunker.fits(effect.text)
        ):
            return False
        out.last_seq = effect.seq
        chunker.feed(effect.text)
        # What ``_pump_stream`` does when the chunker closed nothing and the live message
        # is posted: edit it when its pacing allows.
        self._delivery.mark_dirty(out, live)
        return True

    @staticmethod
    def _ignored(out: Output, effect: AppendOutput) -> bool:
        """An append of a seq already applied, or to an output that takes no more text."""
        return effect.seq <= out.last_seq or out.sealed or out.failed

    def _appended_to(self, effect: AppendOutput) -> Output | None:
        """The output ``effect`` appends to, its ``last_seq`` moved on; None (counted) when
        the append is to be ignored."""
        out = self._book.get(effect.key)
        if out is None or self._ignored(out, effect):
            self._tally.ignored_appends += 1
            return None
        out.last_seq = effect.seq
        return out

    async def resume_stream(
        self, key: str, text: str, last_seq: int, message_ids: tuple[str, ...], sealed: bool
    ) -> None:
        """Go on with a text output another renderer was streaming (a gateway that died
        mid-stream: docs/scale-out.md): ``text`` is all of it so far, ``last_seq`` the seq
        of its last append (later appends go on from there; earlier ones, redelivered, are
        dropped), ``message_ids`` the messages it had posted, oldest first. The chunker is
        fed the whole text again: it cuts the same messages, each bound to the message
        already posted for it (edited to its text), and what goes past them is posted."""
        out = self._book.get(key)
        if out is not None and out.mode != "seeded":
            return  # streamed by this renderer itself
        out = self._book.add(Output(key, "stream", last_seq=last_seq))
        out.opened_at = self._clock() if self._clock is not None else 0.0
        out.chunker = MessageChunker(
            self._budget,
            wrap_links=self._wrap_links,
            close_live_fence=self._close_live,
            unit=self._unit,
        )
        out.chunker.feed(text)
        ids = list(message_ids)
        for chunk in out.chunker.take_closed():
            if is_blank(chunk):
                continue
            message = self._book.new_message(out, chunk)
            if ids:
                message.id = ids.pop(0)
                self._delivery.mark_dirty(out, message)
            else:
                await self._delivery.send(out, message)
        if ids:
            out.live = self._book.new_message(out, None)
            out.live.id = ids.pop(0)
            self._delivery.mark_dirty(out, out.live)
        await self._pump_stream(out)
        if sealed:
            await self._seal(out)

    def _is_new(self, key: str) -> bool:
        return self._book.admit(key, self._tally, self._delivery.busy_outputs)

    async def _post_output(self, effect: PostOutput) -> None:
        if effect.kind == "text":
            out = self._book.add(Output(effect.key, "stream"))
            out.opened_at = self._clock() if self._clock is not None else 0.0
            out.chunker = MessageChunker(
                self._budget,
                wrap_links=self._wrap_links,
                close_live_fence=self._close_live,
                unit=self._unit,
            )
            await self._append(out, effect.text)
        elif effect.kind == "thinking":
            out = self._book.add(Output(effect.key, "preview"))
            await self._append(out, effect.text)
        elif effect.kind == "tool":
            # Sent when its result comes, or after one pacing interval: a quick tool costs
            # one call, a slow one shows its header while it works.
            out = self._book.add(Output(effect.key, "card", text=effect.text))
            await self._show(out, now=False)
        else:  # footer, notice, marker: as given
            out = self._book.add(Output(effect.key, "block", text=effect.text, sealed=True))
            await self._show(out, now=True)

    async def _append(self, out: Output, text: str) -> None:
        if out.mode == "stream":
            assert out.chunker is not None
            out.chunker.feed(text)
            await self._pump_stream(out)
        elif out.mode == "preview":
            out.text += text
            keep = 4 * THINKING_PREVIEW_CHARS  # whitespace is collapsed later: keep some spare
            if len(out.text) > keep:
                out.text, out.truncated = out.text[-keep:], True
            if self._supports_edit and not self._append_only:
                await self._show(out, now=False)  # append-only displays: at the seal
        else:
            out.text += text
            await self._show(out, now=True)

    async def _seal(self, out: Output, *, defer: bool = False) -> None:
        out.sealed = True
        if out.mode == "stream":
            assert out.chunker is not None
            out.chunker.finish()
            await self._pump_stream(out)
            out.chunker = None  # its text is in the messages now
            if defer:
                self._unsettled = out  # the next effect settles it, or joins its last edit
                return
            await self._delivery.settle(out, final_edits=True)
            return
        if out.mode == "preview":
            await self._show(out, now=True)
        await self._delivery.settle(out)

    async def _merge_footer(self, effect: PostOutput) -> bool:
        """The footer in the last message of the stream sealed just before it, when the
        budget is short and it fits (see the module docstring); whether it was."""
        stream = self._unsettled
        if stream is None or self._merge_footers is None or not self._merge_footers():
            return False
        if stream.failed or not stream.messages:
            return False
        host = stream.messages[-1]
        if host.id is None or host.final is None or not self._delivery.is_dirty(host):
            return False  # its final text is out already: an edit more costs as much
        text = f"{host.final}\n-# {effect.text}"
        if text_length(text, self._unit) > self._budget or "\n" in effect.text.strip():
            return False
        out = self._book.add(Output(effect.key, "footer", text=effect.text, sealed=True))
        out.host, out.host_text = host, host.final
        host.final = text
        self._delivery.adopt(out, host)
        await self.settle_pending()  # the stream's other messages, before its last
        await self._delivery.settle(out, final_edits=True)
        return True

    async def _edit_output(self, effect: EditOutput) -> None:
        out = self._book.get(effect.key)
        if out is None:
            self._tally.ignored_appends += 1
            return
        if out.host is not None:  # a footer riding in an answer's last message
            host = out.host
            text = f"{out.host_text}\n-# {effect.text}"
            if text_length(text, self._unit) <= self._budget and "\n" not in effect.text.strip():
                out.text = host.final = text
                self._delivery.mark_dirty(out, host)
                await self._delivery.settle(out)
                return
            # It no longer fits: the answer gets its own text back, the footer a message.
            host.final = out.host_text
            self._delivery.mark_dirty(out, host)
            await self._delivery.settle(out)
            out.host, out.messages, out.mode = None, [], "block"
        elif out.shared:
            # A footer that rode in an answer's message before a restart: that message's
            # text is not known here, so the new footer is a message of its own.
            out.messages, out.mode = [], "block"
        if out.mode in ("stream", "preview", "seeded"):
            if out.mode == "stream" and out.chunker is not None:
                out.chunker.finish()
                out.chunker = None
            out.live = None
            out.mode = "block" if out.mode != "seeded" or len(out.messages) != 1 else "card"
        out.text = effect.text
        out.done = out.mode == "card"  # a tool card's one edit: its result
        await self._show(out, now=True)

    async def _show_prompt(self, effect: ShowPermissionPrompt | ShowQuestion) -> None:
        out = self._book.add(Output(effect.key, "prompt", sealed=True))
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
                effect.question,
                has_options=bool(effect.options),
                multiple=effect.multiple,
                options=effect.options,
                option_chars=self._option_chars,
                menu_options=self._menu_options,
            )
            if effect.options:
                menu = SelectMenu(
                    custom_id=question_menu_id(effect.request_id),
                    options=effect.options,
                    multiple=effect.multiple,
                )
        text = fit_message(out.text, self._budget, wrap_links=self._wrap_links, unit=self._unit)
        message = self._book.new_message(out, text)
        message.buttons = buttons
        await self._delivery.send(out, message, menu=menu)

    async def _dismiss(self, effect: DismissPrompt) -> None:
        out = self._book.get(effect.key)
        if out is None or not out.messages:
            self._tally.ignored_appends += 1
            return
        base = out.text or "🔐 Request"
        outcome = f"\n-# {effect.outcome}"
        out.text = base + outcome
        message = out.messages[0]
        # The outcome is the core's own text, added after the chunker: its "by <@id>" may
        # mention (agent text's mentions are escaped, effects.chunking).
        room = self._budget - text_length(outcome, self._unit)
        base = fit_message(base, room, wrap_links=self._wrap_links, unit=self._unit)
        message.final = base + outcome
        message.buttons = ()  # no more answers
        message.clear_components = True
        self._delivery.mark_dirty(out, message)
        # Now, not at the next paced flush: what the chat shows after the dismissal (the
        # next run's answer and footer) must not appear while the buttons are still there.
        await self._delivery.settle(out, priority=Priority.URGENT)

    async def _post_file(self, effect: PostFile) -> None:
        """The file with its caption, or (no files here) the fallback text as a block."""
        caption = fit_message(
            effect.caption, self._budget, wrap_links=self._wrap_links, unit=self._unit
        )
        out = self._book.add(Output(effect.key, "block", text=caption, sealed=True))
        message = self._book.new_message(out, caption)
        data = effect.content.encode()
        if await self._delivery.send_file(out, message, effect.filename, data):
            return
        out.messages.remove(message)
        out.text = effect.fallback
        await self._show(out, now=True)

    async def _reply(self, effect: ReplyToCommand) -> None:
        out = self._book.add(Output(effect.key, "reply", text=effect.text, sealed=True))
        text = (
            fit_message(effect.text, self._budget, wrap_links=self._wrap_links, unit=self._unit)
            or "…"
        )
        message = self._book.new_message(out, text)
        await self._delivery.reply(
            out, message, effect.action_id, ephemeral=effect.ephemeral, buttons=effect.buttons
        )

    # -- outputs -> messages -------------------------------------------------------------------

    async def _show(self, out: Output, *, now: bool) -> None:
        """Bring a non-streamed output's messages to its wanted texts: edit (paced) the
        ones that were sent, send the missing ones (``now``, or after one pacing interval,
        so that a text changing at once costs one call), delete the surplus."""
        texts = out.rendered_texts(self._budget, wrap_links=self._wrap_links, unit=self._unit)
        for index, text in enumerate(texts):
            if index < len(out.messages):
                message = out.messages[index]
                message.final = text
                if message.id is not None:
                    self._delivery.mark_dirty(out, message)
                elif now and self._delivery.is_unsent(message):
                    await self._delivery.send(out, message)
            else:
                await self._delivery.post(out, self._book.new_message(out, text), now=now)
        for message in out.messages[len(texts) :]:
            await self._delivery.delete(out, message)
        del out.messages[len(texts) :]

    async def _pump_stream(self, out: Output) -> None:
        """Hand the chunker's finished messages and its open one to the platform."""
        assert out.chunker is not None
        delivery = self._delivery
        if not self._supports_edit and self._clock is not None and not out.chunker.finished:
            # No edits: a long answer goes out as it is written, a message per paragraph
            # end at most once per interval, never inside a code block.
            now = self._clock()
            if now >= out.opened_at + self._interval and out.chunker.close_at_paragraph():
                out.opened_at = now
        for text in out.chunker.take_closed():
            if out.live is not None and is_blank(text):
                # It showed the start of a line that moved on to the next message.
                moved_on, out.live = out.live, None
                out.messages.remove(moved_on)
                await delivery.delete(out, moved_on)
                self._tally.blank_skipped += 1
            elif out.live is not None:
                live, out.live = out.live, None
                live.final = text
                if live.id is None:
                    await delivery.send(out, live)  # final already: no reason to wait
                else:
                    delivery.mark_dirty(out, live)
            elif is_blank(text):
                self._tally.blank_skipped += 1
            else:
                await delivery.send(out, self._book.new_message(out, text))
        if out.chunker.finished or not self._supports_edit:
            return  # a platform without edits gets each message once, when it is final
        if out.live is not None:
            if out.live.id is not None:
                delivery.mark_dirty(out, out.live)
            return
        if not is_blank(out.chunker.live_text(whole_lines=self._append_only)):
            # The first message of a stream waits one pacing interval: what streams in by
            # then is in its first send instead of an edit right after it.
            out.live = self._book.new_message(out, None)
            await delivery.post(out, out.live, now=False)

"""``WebPlatform``: the ``ChatPlatform`` of the web chat, kept in memory and published to
the browsers watching each thread.

The renderer drives it like any platform (send, edit, delete, typing, reply with buttons);
nothing is sent anywhere: each thread has a ``ThreadView``, its messages in creation order
(bounded: the oldest go first) and a numbered, bounded list of what changed. A page shows
``ThreadView.messages()`` and then follows the changes after the number it was drawn at
(``changes_after``; a browser that fell further behind than the list reaches is told to
reload: ``None``). ``wait_change`` wakes the server-sent-event streams.

Each message's HTML is made once, when it changes (``effects.web_markup``: markdown with
raw HTML off), so agent text never reaches the page as markup. A send that repeats a
``nonce`` (a retried send whose answer was lost) returns the first message's id. Typing is
a deadline (``typing_refresh_s`` after the last call). Views are kept for the
``MAX_THREADS`` threads used last; the process's memory does not grow with a thread's age.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from threadspindle.effects.platform import PlatformError, PlatformLimits, SelectMenu
from threadspindle.effects.web_markup import message_kind, to_html
from threadspindle.runtime.core.effect_types import Button

__all__ = [
    "MAX_CHANGES",
    "MAX_MESSAGES",
    "MAX_THREADS",
    "WEB_LIMITS",
    "Change",
    "ThreadView",
    "Update",
    "WebMessage",
    "WebPlatform",
]

MAX_MESSAGES = 500  # per thread: the oldest are dropped (the timeline keeps the history)
MAX_CHANGES = 2000  # per thread: a browser further behind reloads the page
MAX_THREADS = 200  # views kept; the least recently used goes
# Characters kept (a message's text and its HTML), in a thread and in all: 500 prompts of
# 100,000 quotes each held ~850 MB (the HTML of a quote is 6 characters).
MAX_THREAD_CHARS = 2_000_000
MAX_TOTAL_CHARS = 64_000_000
_NONCES = 1024

WEB_LIMITS = PlatformLimits(
    # A browser shows a long message well: split rarely, only so one edit stays small.
    char_limit=12000,
    split_margin=200,
    supports_edit=True,
    min_edit_interval_s=0.15,  # an edit costs nothing but a small event to each page
    typing_refresh_s=4.0,
    subtext=True,  # ``-# `` lines are drawn small (effects.web_markup)
    wrap_links=False,  # no embeds to suppress
    option_chars=1_000_000,  # a question's options are buttons with their whole text
    menu_options=1_000_000,
)


@dataclass
class WebMessage:
    """One message as the page shows it."""

    id: str
    text: str
    html: str
    kind: str
    buttons: tuple[Button, ...] = ()
    menu: SelectMenu | None = None
    reply: bool = False  # an answer to a command
    ephemeral: bool = False


@dataclass(frozen=True)
class Change:
    """Change number ``seq`` of a thread: ``put`` (a message new or changed), ``delete``.
    It names the message only: a page is sent the message as it is now (an old version is
    never kept, so a message edited a thousand times costs one copy)."""

    seq: int
    kind: str  # "put" | "delete"
    message_id: str


def _message(
    message_id: str,
    text: str,
    buttons: tuple[Button, ...],
    menu: SelectMenu | None,
    *,
    reply: bool = False,
    ephemeral: bool = False,
) -> WebMessage:
    return WebMessage(
        message_id,
        text,
        to_html(text),
        message_kind(text),
        buttons,
        menu,
        reply=reply,
        ephemeral=ephemeral,
    )


@dataclass(frozen=True)
class Update:
    """One message to draw again on a page (``message`` as it is now) or to remove
    (``message`` None); ``seq`` is the change it stands for."""

    seq: int
    message_id: str
    message: WebMessage | None

    @property
    def kind(self) -> str:
        return "delete" if self.message is None else "put"


@dataclass
class ThreadView:
    """One thread's messages and its numbered changes."""

    thread_id: str
    _messages: OrderedDict[str, WebMessage] = field(default_factory=OrderedDict)
    _changes: deque[Change] = field(default_factory=lambda: deque(maxlen=MAX_CHANGES))
    seq: int = 0  # the number of the last change
    chars: int = 0  # the text and HTML of the messages kept
    typing_until: float = 0.0
    _changed: trio.Event = field(default_factory=trio.Event)

    def messages(self) -> list[WebMessage]:
        return list(self._messages.values())

    def get(self, message_id: str) -> WebMessage | None:
        return self._messages.get(message_id)

    def changes_after(self, seq: int) -> list[Change] | None:
        """The changes numbered above ``seq``; None when some of them are no longer kept
        (the page must be drawn again)."""
        if seq >= self.seq:
            return []
        if not self._changes or self._changes[0].seq > seq + 1:
            return None
        return [c for c in self._changes if c.seq > seq]

    def updates_after(self, seq: int) -> list[Update] | None:
        """What a page that saw change ``seq`` must do, in order: one ``Update`` per message
        changed since (at its last change: the message as it is now, or its deletion);
        None when the page must be drawn again."""
        changes = self.changes_after(seq)
        if changes is None:
            return None
        last = {c.message_id: c.seq for c in changes}
        updates: list[Update] = []
        for change in changes:
            if last[change.message_id] != change.seq:
                continue  # a later change of the same message says it all
            message = self._messages.get(change.message_id)
            updates.append(Update(change.seq, change.message_id, message))
        return updates

    async def wait_change(self, after_seq: int) -> None:
        """Until there is a change numbered above ``after_seq``, or the next ``wake``
        (typing, which the status panel shows)."""
        if self.seq <= after_seq:
            await self._changed.wait()

    def wake(self) -> None:
        """Wake every stream waiting on this thread (a change, typing, its status)."""
        self._changed.set()
        self._changed = trio.Event()

    def _publish(self, kind: str, message_id: str) -> None:
        self.seq += 1
        self._changes.append(Change(self.seq, kind, message_id))
        self.wake()

    def put(self, message: WebMessage) -> int:
        """Keep ``message`` (new, or a new version), dropping the oldest past
        ``MAX_MESSAGES`` or ``MAX_THREAD_CHARS``; the change in ``chars``."""
        before = self.chars
        replaced = self._messages.get(message.id)
        if replaced is not None:
            self.chars -= _size(replaced)
        self._messages[message.id] = message
        self.chars += _size(message)
        messages = self._messages
        while len(messages) > 1 and (len(messages) > MAX_MESSAGES or self.chars > MAX_THREAD_CHARS):
            old, gone = messages.popitem(last=False)
            self.chars -= _size(gone)
            self._publish("delete", old)
        self._publish("put", message.id)
        return self.chars - before

    def delete(self, message_id: str) -> int:
        """Drop the message; the change in ``chars``."""
        gone = self._messages.pop(message_id, None)
        if gone is None:
            return 0
        self.chars -= _size(gone)
        self._publish("delete", message_id)
        return -_size(gone)


def _size(message: WebMessage) -> int:
    return len(message.text) + len(message.html)


class WebPlatform:
    """The web chat's ``ChatPlatform``; see the module docstring."""

    def __init__(
        self,
        limits: PlatformLimits | None = None,
        *,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self.limits = limits or WEB_LIMITS
        self.streams_append_only = False
        self._clock = clock
        self._views: OrderedDict[str, ThreadView] = OrderedDict()
        self._chars = 0  # the views' ``chars``, in all
        self._ids = itertools.count(1)
        self._nonces: OrderedDict[str, str] = OrderedDict()
        self.calls = 0
        self.titles: dict[str, str] = {}  # channel -> the agent's title (rename_thread)

    # --- what the web ingress reads ----------------------------------------------------------

    def view(self, thread_id: str) -> ThreadView:
        """The thread's view (made empty when it has none), now the most recently used."""
        view = self._views.get(thread_id)
        if view is None:
            view = self._views[thread_id] = ThreadView(thread_id)
            while len(self._views) > MAX_THREADS:
                self._chars -= self._views.popitem(last=False)[1].chars
        else:
            self._views.move_to_end(thread_id)
        return view

    def _put(self, view: ThreadView, message: WebMessage) -> None:
        self._chars += view.put(message)
        # Past the budget of all views, the threads used least recently go (``view``, the
        # one just used, is the last of them): a page of one of them starts empty again.
        while self._chars > MAX_TOTAL_CHARS and len(self._views) > 1:
            oldest = next(iter(self._views))
            if oldest == view.thread_id:
                break
            self._chars -= self._views.pop(oldest).chars

    def knows(self, thread_id: str) -> bool:
        """Whether the thread has a view (without making one)."""
        return thread_id in self._views

    def typing_now(self, thread_id: str) -> bool:
        view = self._views.get(thread_id)
        return view is not None and view.typing_until > self._clock()

    def user_said(self, thread_id: str, text: str) -> str:
        """What the user typed, shown in the thread as a chat shows its user's messages
        (the core posts nothing for them: on Discord they are already there)."""
        message = _message(self._new_id(), text, (), None)
        message.kind = "user"
        self._put(self.view(thread_id), message)
        return message.id

    def _new_id(self) -> str:
        return str(next(self._ids))

    def _existing(self, channel_id: str, message_id: str) -> tuple[ThreadView, WebMessage]:
        view = self.view(channel_id)
        message = view.get(message_id)
        if message is None:
            raise PlatformError(f"no message {message_id} in {channel_id}")
        return view, message

    # --- ChatPlatform -----------------------------------------------------------------

    async def send(
        self,
        channel_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] = (),
        menu: SelectMenu | None = None,
        nonce: str | None = None,
    ) -> str:
        await trio.lowlevel.checkpoint()
        self.calls += 1
        if nonce is not None and nonce in self._nonces:
            return self._nonces[nonce]
        message = _message(self._new_id(), text, buttons, menu)
        self._put(self.view(channel_id), message)
        if nonce is not None:
            self._nonces[nonce] = message.id
            while len(self._nonces) > _NONCES:
                self._nonces.popitem(last=False)
        return message.id

    async def edit(
        self,
        channel_id: str,
        message_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] | None = None,
    ) -> None:
        await trio.lowlevel.checkpoint()
        self.calls += 1
        view, old = self._existing(channel_id, message_id)
        kept = old.buttons if buttons is None else buttons
        # A prompt whose buttons are taken away (answered, dismissed) loses its menu too.
        menu = old.menu if buttons is None else None
        self._put(
            view, _message(message_id, text, kept, menu, reply=old.reply, ephemeral=old.ephemeral)
        )

    async def delete(self, channel_id: str, message_id: str) -> None:
        await trio.lowlevel.checkpoint()
        self.calls += 1
        self._chars += self.view(channel_id).delete(message_id)  # gone already: a success

    async def rename_thread(self, channel_id: str, title: str) -> None:
        """Kept in ``titles``. The pages show the thread's name from its state
        (``ThreadState.title``, set by the core at once), so a rename only wakes the pages
        watching the thread: their status event carries the new name."""
        await trio.lowlevel.checkpoint()
        self.titles[channel_id] = title
        self.view(channel_id).wake()

    async def send_file(
        self, channel_id: str, filename: str, data: bytes, caption: str
    ) -> str | None:
        """The web chat shows no downloads: the text is shown instead."""
        await trio.lowlevel.checkpoint()
        return None

    async def typing(self, channel_id: str) -> None:
        await trio.lowlevel.checkpoint()
        self.calls += 1
        view = self.view(channel_id)
        view.typing_until = self._clock() + self.limits.typing_refresh_s + 1.0
        view.wake()

    async def reply(
        self,
        channel_id: str,
        action_id: str,
        text: str,
        *,
        ephemeral: bool = False,
        buttons: tuple[Button, ...] = (),
    ) -> str:
        await trio.lowlevel.checkpoint()
        self.calls += 1
        message = _message(self._new_id(), text, buttons, None, reply=True, ephemeral=ephemeral)
        self._put(self.view(channel_id), message)
        return message.id

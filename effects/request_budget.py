"""``RequestBudget``: one chat connection's request budget, shared by every thread's renderer.

A bot may make only so many API requests: Discord about 50 a second in all, and per
channel 5 message sends and 5 edits per 5 s; Telegram about 30 messages a second, and 20 a
minute in one group; Slack so many calls of each method a minute in the workspace. Each
renderer paces its own messages, but 200 threads streaming at once ask for far more than
that; without one budget the platform's own limiter (or a 429) makes every thread wait,
command replies and permission prompts behind intermediate edits.
Every call a renderer makes passes here first (``effects.retrying_platform`` asks, one
token per attempt). What it keeps:

- **Windows, not a refilling bucket.** Discord counts requests in fixed windows whose
  phase we cannot see; a token bucket that refills continuously would spend a second
  burst inside the server's window. A token is held from its grant until its request
  reached the server, and comes back ``window_s + margin_s`` after that (a sliding window
  log), so any window of the server's length holds at most ``requests`` of ours, whatever
  its phase and however long a request took to leave a busy process (granted tokens used
  seconds later, in a burst, would otherwise overrun the server's window). When it
  reached the server we bound from both sides: not before it left (``Ticket.sent``: the
  HTTP client stamps the moment its bytes are written, an aiohttp trace on Discord's), not
  after its answer came (``Ticket.answered``, the same trace), and, not answered yet, not
  later than ``in_flight_s`` after it left (a request that slow is taken to have arrived:
  the server counted it). A request nobody stamped (a platform without the trace, a call
  that failed before it went out) counts from its ``release``. Why not simply from
  ``release`` (as before): the answer then crosses back from discord.py into trio first,
  0.5-1 s in a busy bot, and the budget granted two thirds of its size; why not from the
  moment it left (``margin_s`` covering the way to the server): a starved process (or
  server) delivers requests late and together, and the chat_budget bench saw 52 in one
  second at the fake.
- **Calls that are not the budget's** (``count_outside``): a request no ticket stamped
  (ingress's own calls) is counted in the global window as it goes out, so the grants
  after it leave room for it; ``requests`` below the platform's limit covers a burst.
- **Calls inside calls** (``try_inside``): a call the platform makes on its own within a
  granted one (Slack's working line) goes only with a token to spare in its kind's
  windows, and is counted there as it goes out; else the platform does without it.
- **Exempt kinds** (``global_exempt``) take no global token: Discord does not count
  interaction followups (a slash command's reply) against its global limit.
- **Per-channel rules** (``ChannelRule``) by call kind, on the channel's *scope* (Telegram:
  the chat a forum topic is in; ``scope_of``), e.g. 5 edits per 5 s per channel; or across
  channels, one window for the connection (Slack: 50 ``chat.update`` a minute in the
  workspace), where a 429 for that kind holds every channel.
- **Priorities.** ``Priority.URGENT`` (command replies, permission and question prompts and
  their dismissal) before ``Priority.POST`` (first posts, footers, a sealed stream's final
  text, deletions) before ``Priority.EDIT`` (intermediate edits of streamed text).
  A lower class never takes the last ``reserve`` tokens of a window that a higher one may
  take, so a reply finds a token at once even while every thread streams; an ``EDIT``
  leaves its channel's last token of a rule's window (5 edits per 5 s) to the final text:
  a seal in the thread's chat lane, a reply queued behind it, never waits out a channel
  window its own paced edits spent (that held 50-thread replies ~1 s in chat_budget).
  A waiter held up only by its own channel's rule does not hold up the others.
- **Priority inheritance** (``expedite``): a command reply or a prompt queued behind its
  own thread's effects (the thread's chat lane applies one at a time: a first post or a
  sealed output's final text waiting for a ``POST`` token holds the reply up) lifts that
  channel's waiting ``POST`` requests to ``URGENT``; the renderer asks at ``URGENT`` too
  until the reply is out (``RetryingPlatform.urgent``).
- **Fair.** Within a class, channels take turns (round-robin): a channel served goes to the
  back of the line; its later requests wait behind every other channel's.
- **A final edit keeps the thread's place** (``acquire(final=True)``): a streamed answer's
  final text is the last of the edits that keep its thread current, so it is an ``EDIT``
  that goes ahead of its own channel's paced edit, in that channel's turn (not a ``POST``
  ahead of every streaming thread: 200 threads ending together starved the others' edits
  for seconds), and it may take its channel's last token of a rule's window. ``expedite``
  lifts it like a post: it holds the thread's chat lane as a post does.
- **Short** (``short``): no token to spare in the global window; a renderer then saves
  the calls it can (a footer rides in the answer's last edit).
- **Coalescing is the caller's.** A renderer asks for an edit's token *before* it reads the
  text to send, so whatever streamed in while it waited is in that one edit
  (``StreamRenderer.run``).
- **Typing never waits** (``try_acquire``): it is cosmetic, granted only with no one
  waiting and a reserve to spare.
- **The platform's word wins.** A 429 (``hold``) stops all grants (global) or the channel's
  kind until its ``retry_after``; rate-limit headers (``observe``) replace a rule's
  documented size with the one the server reports, and a bucket the server reports
  spent holds its kind in the channel until it resets (``spent``).

Grants are made by ``run`` (one task per connection, in ``ThreadRenderers``) when a token
comes back, and at once by ``acquire`` when one is free. It reads time from ``clock``
(trio's, so trio's ``MockClock`` drives it in tests) and makes no platform call itself.
The limits it enforces, and each platform's, are ``effects.budget_limits``' (re-exported
here: a budget's callers need both).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

import trio

from threadspindle.effects.budget_limits import (
    DISCORD_BUDGET,
    SLACK_BUDGET,
    TELEGRAM_BUDGET,
    TELEGRAM_CHAT_RULE,
    BudgetLimits,
    ChannelRule,
    Priority,
    slack_scope,
    telegram_scope,
)
from threadspindle.effects.budget_window import TokenWindow
from threadspindle.runtime.core.frozen import Frozen

__all__ = [
    "ALL_CHANNELS",
    "DISCORD_BUDGET",
    "SLACK_BUDGET",
    "TELEGRAM_BUDGET",
    "TELEGRAM_CHAT_RULE",
    "BudgetLimits",
    "BudgetStatistics",
    "CallKind",
    "ChannelRule",
    "Priority",
    "RequestBudget",
    "Ticket",
    "request_answered",
    "request_sent",
    "slack_scope",
    "telegram_scope",
]

CallKind = Literal["send", "edit", "delete", "reply", "typing"]

_TIDY_EVERY_S = 60.0  # how often the windows of quiet channels are dropped
ALL_CHANNELS = "*"  # the scope of a rule counted across channels (``ChannelRule.across_channels``)


def _own_scope(channel_id: str) -> tuple[str, bool]:
    return channel_id, False


class BudgetStatistics(Frozen):
    granted: int = 0  # tokens handed out (refunds subtracted)
    granted_by_priority: tuple[int, int, int] = (0, 0, 0)  # URGENT, POST, EDIT
    typing_granted: int = 0
    typing_refused: int = 0  # typing calls skipped: no token to spare
    refunded: int = 0  # tokens given back unused (an edit that had nothing new to show)
    waiting: int = 0  # callers waiting for a token now
    waiting_by_priority: tuple[int, int, int] = (0, 0, 0)
    max_wait_s: tuple[float, float, float] = (0.0, 0.0, 0.0)  # the longest wait, by class
    holds: int = 0  # 429s reported (``hold``)
    held_until: float = -math.inf  # no grant before this (a global 429)
    in_window: int = 0  # tokens held: requests in flight and completed within a window
    observed: int = 0  # rules resized from the platform's rate-limit headers
    spent: int = 0  # buckets the platform reported spent (``spent``)
    channel_windows: int = 0  # per-channel windows kept (quiet ones are dropped)
    stamped: int = 0  # requests counted from when they left (``Ticket.sent``)
    unstamped: int = 0  # requests counted from their ``release`` (nothing stamped them)
    expedited: int = 0  # waiting requests lifted to URGENT (``expedite``)
    answered_early: int = 0  # requests answered within ``in_flight_s`` (a call may make 2)
    outside: int = 0  # requests the budget did not grant, counted as they went out
    inside: int = 0  # calls a platform made inside a granted one, counted (``try_inside``)
    inside_refused: int = 0  # such calls the platform did without: no token to spare


@dataclass(eq=False)
class _Waiter:
    priority: Priority
    channel: str
    scope: str
    group: bool
    kind: str
    since: float
    event: trio.Event = field(default_factory=trio.Event)
    granted: bool = False
    final: bool = False  # an EDIT that seals its message (``acquire(final=True)``)


class Ticket:
    """One attempt's token while its request is being made (``RequestBudget.sending``):
    when its request left and was answered, for the windows to count it from when it
    reached the server (see the module docstring)."""

    __slots__ = ("budget", "channel_id", "closed", "counted", "kind", "request", "sent_at")

    def __init__(self, budget: RequestBudget, channel_id: str, kind: str) -> None:
        self.budget = budget
        self.channel_id = channel_id
        self.kind = kind
        self.sent_at: float | None = None  # when the last request left
        self.counted = math.nan  # the time the windows count it from
        self.request: object = None  # the HTTP request stamped last (the client's handle)
        self.closed = False  # released: stamps after that are not this attempt's

    def sent(self, request: object) -> None:
        """``request``'s bytes are being written. The same request stamped again (its
        body after its headers) moves its stamp; another one (the client retried on its
        own) counts as one more request."""
        if not self.closed:
            self.budget._sent(self, request)

    def answered(self, request: object) -> None:
        """``request``'s answer came: it reached the server by now."""
        if not self.closed and request is self.request:
            self.budget._answered(self)


# The ticket of the attempt being made in this context (trio task, and the asyncio task a
# call into asyncio copies its context to): how the HTTP client's trace finds it.
_SENDING: ContextVar[Ticket | None] = ContextVar("spindle_request_ticket", default=None)


def request_sent(request: object) -> bool:
    """For a platform's HTTP client (an aiohttp trace): ``request`` (its per-request
    handle) is being written to the network, for the attempt whose ticket this context
    holds, if any (see ``Ticket.sent``); whether one did (else the call is not the
    budget's own: ``RequestBudget.count_outside``)."""
    ticket = _SENDING.get()
    if ticket is not None:
        ticket.sent(request)
        return True
    return False


def request_answered(request: object) -> None:
    """For a platform's HTTP client: ``request``'s answer came (``Ticket.answered``)."""
    ticket = _SENDING.get()
    if ticket is not None:
        ticket.answered(request)


class RequestBudget:
    """One connection's budget; see the module docstring. Run ``run`` in a nursery
    (``nursery.start(budget.run)``) so that waiters are served when tokens come back."""

    def __init__(
        self,
        limits: BudgetLimits,
        *,
        scope_of: Callable[[str], tuple[str, bool]] = _own_scope,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self.limits = limits
        self._scope_of = scope_of
        self._clock = clock
        self._global = TokenWindow(limits.requests, limits.window_s + limits.margin_s)
        self._exempt = frozenset(limits.global_exempt)
        self._rules: dict[str, list[ChannelRule]] = {}  # kind -> the rules that count it
        for rule in limits.channel_rules:
            for kind in rule.kinds:
                self._rules.setdefault(kind, []).append(rule)
        self._windows: dict[tuple[str, int], TokenWindow] = {}  # (scope, rule index) -> window
        self._rule_index = {id(r): n for n, r in enumerate(limits.channel_rules)}
        # Kinds a rule counts across channels: their holds are the connection's.
        self._across = frozenset(
            kind for rule in limits.channel_rules if rule.across_channels for kind in rule.kinds
        )
        self._learned: dict[tuple[str, int], tuple[int, float]] = {}  # from headers
        self._holds: dict[tuple[str, str], float] = {}  # (scope, kind) -> held until
        self._held_until = -math.inf
        # Per class, the channels in turn order, each with its waiters in arrival order.
        self._queues: tuple[OrderedDict[str, deque[_Waiter]], ...] = tuple(
            OrderedDict() for _ in Priority
        )
        self._waiting = [0, 0, 0]
        self._granted = [0, 0, 0]
        self._max_wait = [0.0, 0.0, 0.0]
        self._typing_granted = self._typing_refused = self._refunded = 0
        self._hold_count = self._observed = self._spent = 0
        self._stamped = self._unstamped = self._expedited = self._answered_early = 0
        self._outside = 0
        self._inside = self._inside_refused = 0
        self._outside_last: object = None
        self._changed = trio.Event()

    # -- asking ------------------------------------------------------------------------------

    async def acquire(
        self, priority: Priority, channel_id: str, kind: CallKind, *, final: bool = False
    ) -> None:
        """Wait for a token for one ``kind`` call in ``channel_id``. The caller makes the
        call and then must ``release`` the token (or ``refund`` it, unused). ``final``: an
        ``EDIT`` that brings a streamed message to its final text: it takes its channel's
        place in the line, ahead of the channel's own paced edit, and may take the channel's
        last token of a rule's window (see the module docstring)."""
        scope, group = self._scope_of(channel_id)
        now = self._clock()
        waiter = _Waiter(priority, channel_id, scope, group, kind, now, final=final)
        queue = self._queues[priority]
        waiters = queue.setdefault(channel_id, deque())
        if final:
            waiters.appendleft(waiter)
        else:
            waiters.append(waiter)
        self._waiting[priority] += 1
        self._dispatch(now)
        if waiter.granted:
            return
        self._changed.set()
        try:
            await waiter.event.wait()
        except BaseException:
            if waiter.granted:
                self.refund(channel_id, kind, waiter.priority)  # cancelled as it was granted
            else:
                self._drop(waiter)
            raise

    def short(self) -> bool:
        """Whether the connection is at its limit now: held by a 429, or the global
        window has no token left beyond the reserves (a call would wait). A renderer then
        saves what calls it can (``render_compose``: a footer rides in the answer)."""
        now = self._clock()
        spare = len(Priority) * self.limits.reserve
        return now < self._held_until or self._global.free_at(now, spare) > now

    def channel_short(self, channel_id: str, kind: CallKind) -> bool:
        """Whether a ``kind`` call in ``channel_id`` would wait now: the connection is
        ``short``, the channel's rules (or a 429's hold) have no token left, or calls of
        the channel already wait for theirs. A renderer then joins what it may into fewer
        calls (finished tool cards: ``render_pacing``)."""
        if self.short() or any(channel_id in queue for queue in self._queues):
            return True
        scope, group = self._scope_of(channel_id)
        now = self._clock()
        return self._channel_free_at(scope, group, kind, now) > now

    def try_acquire(self, channel_id: str, kind: CallKind = "typing") -> bool:
        """A token now if one is to spare (nobody waiting, a reserve left): typing.
        ``release`` it after the call, as one from ``acquire``."""
        now = self._clock()
        scope, group = self._scope_of(channel_id)
        spare = (len(Priority)) * self.limits.reserve
        if (
            sum(self._waiting) == 0
            and now >= self._held_until
            and self._global.free_at(now, spare) <= now
            and self._channel_free_at(scope, group, kind, now) <= now
        ):
            self._take(scope, group, kind)
            self._typing_granted += 1
            return True
        self._typing_refused += 1
        return False

    def count_outside(self, request: object) -> None:
        """A request the budget did not grant is going out (ingress's own calls: a thread
        made for a conversation, a notice): counted in the global window as a token's
        would be, so the grants that follow leave room for it. Its headers and its body
        are stamped apart: ``request`` is counted once."""
        if request is self._outside_last:
            return
        self._outside_last = request
        self._outside += 1
        self._global.count(self._clock() + self.limits.in_flight_s)
        self._changed.set()

    def try_inside(self, channel_id: str, kind: CallKind) -> bool:
        """May the platform make a call of its own, inside one the budget granted (Slack's
        "working…" line: its post, edits and delete ride in a typing or send call)? Yes
        when every window its kind counts in has a token to spare now (the global one
        beyond the reserves, a channel rule's beyond the last, kept for final text); the
        call is then counted as it goes out. No: the platform does without it for now (a
        refresh skipped, a deletion left for the next chance)."""
        now = self._clock()
        scope, group = self._scope_of(channel_id)
        spare = len(Priority) * self.limits.reserve
        exempt = kind in self._exempt
        if (
            now < self._held_until
            or (not exempt and self._global.free_at(now, spare) > now)
            or self._channel_free_at(scope, group, kind, now, 1) > now
        ):
            self._inside_refused += 1
            return False
        at = now + self.limits.in_flight_s
        if not exempt:
            self._global.count(at)
        for window in self._channel_windows(scope, group, kind):
            window.count(at)
        self._inside += 1
        self._changed.set()
        return True

    def release(self, channel_id: str, kind: CallKind, ticket: Ticket | None = None) -> None:
        """The request of a granted token completed (answered or failed): the token comes
        back one window after the request left (``ticket``, stamped by ``Ticket.sent``),
        or one window from now when nothing stamped it."""
        if ticket is not None:
            ticket.closed = True
            if ticket.sent_at is not None:
                return  # counted from when it left
        self._unstamped += 1
        scope, group = self._scope_of(channel_id)
        now = self._clock()
        if kind not in self._exempt:
            self._global.complete(now)
        for window in self._channel_windows(scope, group, kind):
            window.complete(now)
        self._changed.set()

    @contextmanager
    def sending(self, channel_id: str, kind: CallKind) -> Iterator[Ticket]:
        """Around one granted attempt's call: the platform's HTTP client can stamp when the
        request left (``request_sent``); the token is released when the call is over."""
        ticket = Ticket(self, channel_id, kind)
        reset = _SENDING.set(ticket)
        try:
            yield ticket
        finally:
            _SENDING.reset(reset)
            self.release(channel_id, kind, ticket)

    def _ticket_windows(self, ticket: Ticket) -> list[TokenWindow]:
        scope, group = self._scope_of(ticket.channel_id)
        windows = self._channel_windows(scope, group, ticket.kind)
        if ticket.kind not in self._exempt:
            windows.append(self._global)
        return windows

    def _sent(self, ticket: Ticket, request: object) -> None:
        now = self._clock()
        latest = now + self.limits.in_flight_s  # when it reached the server at the latest
        if ticket.sent_at is None:
            self._stamped += 1
            for window in self._ticket_windows(ticket):
                window.complete(latest)  # in flight -> counted
        elif request is ticket.request:
            for window in self._ticket_windows(ticket):
                window.restamp(ticket.counted, latest)
        else:
            for window in self._ticket_windows(ticket):
                window.count(latest)
        ticket.sent_at, ticket.request, ticket.counted = now, request, latest
        self._changed.set()  # the token's return is now known: the next wake-up moves

    def _answered(self, ticket: Ticket) -> None:
        now = self._clock()
        if ticket.sent_at is None or now >= ticket.counted:
            return
        for window in self._ticket_windows(ticket):
            window.restamp(ticket.counted, now)
        ticket.counted = now
        self._answered_early += 1
        self._changed.set()

    def refund(self, channel_id: str, kind: CallKind, priority: Priority) -> None:
        """Give back a token that was not used (the edit had nothing new to show)."""
        scope, group = self._scope_of(channel_id)
        if kind not in self._exempt:
            self._global.give_back()
        for window in self._channel_windows(scope, group, kind):
            window.give_back()
        self._granted[priority] -= 1
        self._refunded += 1
        self._changed.set()

    def expedite(self, channel_id: str, below: Priority = Priority.POST) -> int:
        """Lift ``channel_id``'s waiting requests of class ``below`` to ``URGENT`` (something
        urgent of the channel waits behind them), and its final edits (they hold the
        thread's chat lane as a post does; its paced edits hold nothing); returns how many
        were lifted."""
        lifted = list(self._queues[below].pop(channel_id, ()))
        self._waiting[below] -= len(lifted)
        edits = self._queues[Priority.EDIT].get(channel_id)
        if edits and below != Priority.EDIT:
            finals = [w for w in edits if w.final]
            for waiter in finals:
                edits.remove(waiter)
            if not edits:
                del self._queues[Priority.EDIT][channel_id]
            self._waiting[Priority.EDIT] -= len(finals)
            lifted += finals
        if not lifted:
            return 0
        urgent = self._queues[Priority.URGENT].setdefault(channel_id, deque())
        for waiter in lifted:
            waiter.priority = Priority.URGENT
            urgent.append(waiter)
        self._waiting[Priority.URGENT] += len(lifted)
        self._expedited += len(lifted)
        self._dispatch(self._clock())
        self._changed.set()
        return len(lifted)

    # -- what the platform says ---------------------------------------------------------------

    def hold(self, retry_after: float, *, channel_id: str | None = None, kind: str = "") -> None:
        """A 429: no grant at all (``channel_id`` None: the global limit) or none of
        ``kind`` in the channel's scope for ``retry_after`` seconds."""
        until = self._clock() + max(retry_after, 0.0)
        self._hold_count += 1
        if channel_id is None:
            self._held_until = max(self._held_until, until)
        else:
            key = (self._hold_scope(channel_id, kind), kind)
            self._holds[key] = max(self._holds.get(key, -math.inf), until)
        self._changed.set()

    def spent(self, channel_id: str, kind: str, reset_after_s: float) -> None:
        """The platform says the channel's bucket for ``kind`` has no call left for
        ``reset_after_s`` seconds (Discord: ``X-RateLimit-Remaining: 0``): no grant of that
        kind in the channel's scope until then. Not a 429: not counted as a hold."""
        until = self._clock() + max(reset_after_s, 0.0)
        key = (self._hold_scope(channel_id, kind), kind)
        self._holds[key] = max(self._holds.get(key, -math.inf), until)
        self._spent += 1
        self._changed.set()

    def observe(self, channel_id: str, kind: str, limit: int, reset_after_s: float) -> None:
        """The platform's rate-limit headers for a ``kind`` call in ``channel_id``: its
        bucket allows ``limit`` calls and resets in ``reset_after_s`` (so its window is at
        least that long). A rule of that kind in the channel's scope takes the server's
        size where it is stricter than the documented one."""
        if limit <= 0 or reset_after_s < 0:
            return
        scope, group = self._scope_of(channel_id)
        for rule in self._rules.get(kind, []):
            if rule.groups_only and not group:
                continue
            index = self._rule_index[id(rule)]
            key = (ALL_CHANNELS if rule.across_channels else scope, index)
            old_limit, old_span = self._learned.get(key, (rule.limit, rule.per_s))
            size = (min(limit, old_limit), max(reset_after_s, old_span))
            if size != (old_limit, old_span):
                self._learned[key] = size
                window = self._windows.get(key)
                if window is not None:
                    window.limit, window.span = size[0], size[1] + self.limits.margin_s
                self._observed += 1

    # -- the grants ---------------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve waiters as tokens come back, until cancelled."""
        task_status.started()
        tidy_at = self._clock() + _TIDY_EVERY_S
        while True:
            self._changed = trio.Event()
            now = self._clock()
            if now >= tidy_at:
                self.forget_idle()
                tidy_at = now + _TIDY_EVERY_S
            wake = self._dispatch(now)
            with trio.move_on_at(min(wake, tidy_at)):
                await self._changed.wait()

    def _dispatch(self, now: float) -> float:
        """Grant every waiter that can go now, by class and turn; returns when the next
        one could (``inf``: no one waits)."""
        if not any(self._waiting):
            return math.inf
        if now < self._held_until:
            return self._held_until
        while True:
            wake, granted = self._one_turn(now)
            if not granted:
                return wake

    def _one_turn(self, now: float) -> tuple[float, bool]:
        """One grant at most per waiting channel, class by class; (next wake, any grant)."""
        wake, granted = math.inf, False
        for priority in Priority:
            queue = self._queues[priority]
            if not queue:
                continue
            spare = priority * self.limits.reserve
            served: list[str] = []
            starved = False
            for channel, waiters in queue.items():
                waiter = waiters[0]
                exempt = waiter.kind in self._exempt
                global_at = now if exempt else self._global.free_at(now, spare)
                if global_at > now:
                    wake, starved = min(wake, global_at), True
                    break
                # An intermediate edit leaves its channel's last token of a rule's window
                # to the final text and the posts: a sealed output's settle (in the
                # thread's chat lane, a reply queued behind it) never waits a channel
                # window out behind the thread's own paced edits.
                ready = self._channel_free_at(
                    waiter.scope,
                    waiter.group,
                    waiter.kind,
                    now,
                    1 if priority == Priority.EDIT and not waiter.final else 0,
                )
                if ready > now:
                    wake = min(wake, ready)  # its own channel holds it: the others go
                    continue
                waiters.popleft()
                self._grant(waiter, now)
                served.append(channel)
            for channel in served:
                waiters = queue.pop(channel)
                if waiters:
                    queue[channel] = waiters  # to the back of the line
            granted = granted or bool(served)
            if starved:
                break  # the lower classes leave more spare: none of them can go either
        return wake, granted

    def _grant(self, waiter: _Waiter, now: float) -> None:
        self._take(waiter.scope, waiter.group, waiter.kind)
        waiter.granted = True
        self._waiting[waiter.priority] -= 1
        self._granted[waiter.priority] += 1
        self._max_wait[waiter.priority] = max(self._max_wait[waiter.priority], now - waiter.since)
        waiter.event.set()

    def _drop(self, waiter: _Waiter) -> None:
        queue = self._queues[waiter.priority]
        waiters = queue.get(waiter.channel)
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            self._waiting[waiter.priority] -= 1
            if not waiters:
                del queue[waiter.channel]

    def _take(self, scope: str, group: bool, kind: str) -> None:
        if kind not in self._exempt:
            self._global.take()
        for window in self._channel_windows(scope, group, kind):
            window.take()

    def _channel_windows(self, scope: str, group: bool, kind: str) -> list[TokenWindow]:
        windows = []
        for rule in self._rules.get(kind, []):
            if rule.groups_only and not group:
                continue
            index = self._rule_index[id(rule)]
            key = (ALL_CHANNELS if rule.across_channels else scope, index)
            window = self._windows.get(key)
            if window is None:
                limit, per_s = self._learned.get(key, (rule.limit, rule.per_s))
                window = self._windows[key] = TokenWindow(limit, per_s + self.limits.margin_s)
            windows.append(window)
        return windows

    def _hold_scope(self, channel_id: str, kind: str) -> str:
        """Where a 429 (or a spent bucket) of a ``kind`` call in ``channel_id`` holds: the
        whole connection when a rule counts that kind across channels (Slack: a method's
        tier is the workspace's), else the channel's scope."""
        if kind in self._across:
            return ALL_CHANNELS
        return self._scope_of(channel_id)[0]

    def _channel_free_at(
        self, scope: str, group: bool, kind: str, now: float, spare: int = 0
    ) -> float:
        key = (ALL_CHANNELS if kind in self._across else scope, kind)
        ready = self._holds.get(key, -math.inf)
        if ready <= now:
            self._holds.pop(key, None)
            ready = now
        for window in self._channel_windows(scope, group, kind):
            ready = max(ready, window.free_at(now, min(spare, window.limit - 1)))
        return ready

    def forget_idle(self) -> None:
        """Drop the windows of channels with nothing in them (bounded memory)."""
        now = self._clock()
        for key, window in list(self._windows.items()):
            window.free_at(now)  # drops the expired completions
            if not window.times and not window.flying and key not in self._learned:
                del self._windows[key]

    # -- statistics ---------------------------------------------------------------------------

    def statistics(self) -> BudgetStatistics:
        now = self._clock()
        self._global.free_at(now)  # drops the expired tokens
        return BudgetStatistics(
            granted=sum(self._granted),
            granted_by_priority=(self._granted[0], self._granted[1], self._granted[2]),
            typing_granted=self._typing_granted,
            typing_refused=self._typing_refused,
            refunded=self._refunded,
            waiting=sum(self._waiting),
            waiting_by_priority=(self._waiting[0], self._waiting[1], self._waiting[2]),
            max_wait_s=(self._max_wait[0], self._max_wait[1], self._max_wait[2]),
            holds=self._hold_count,
            held_until=self._held_until,
            in_window=len(self._global.times) + self._global.flying,
            observed=self._observed,
            spent=self._spent,
            channel_windows=len(self._windows),
            stamped=self._stamped,
            unstamped=self._unstamped,
            expedited=self._expedited,
            answered_early=self._answered_early,
            outside=self._outside,
            inside=self._inside,
            inside_refused=self._inside_refused,
        )

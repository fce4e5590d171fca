"""What a chat platform allows: the limits one connection's ``RequestBudget``
(``effects.request_budget``) enforces, and the request classes it grants in order.

``BudgetLimits`` is a platform's global window, its per-channel rules (``ChannelRule``),
the calls it does not count and the reserves between the classes (``Priority``);
``DISCORD_BUDGET``, ``TELEGRAM_BUDGET`` and ``SLACK_BUDGET`` are the documented figures,
with why each differs from the bare documentation; ``telegram_scope`` and ``slack_scope``
name the chat (channel) a topic's (thread's) rules count in. Data only: no clock, no I/O.
"""

from __future__ import annotations

from enum import IntEnum

from threadspindle.runtime.core.frozen import Frozen

__all__ = [
    "DISCORD_BUDGET",
    "SLACK_BUDGET",
    "TELEGRAM_BUDGET",
    "TELEGRAM_CHAT_RULE",
    "BudgetLimits",
    "ChannelRule",
    "Priority",
    "slack_scope",
    "telegram_scope",
]


class Priority(IntEnum):
    URGENT = 0  # command replies, permission/question prompts and their dismissal
    POST = 1  # first posts, footers, tool cards, a sealed output's final text, deletions
    EDIT = 2  # intermediate edits of streamed text


class ChannelRule(Frozen):
    """At most ``limit`` calls of ``kinds`` per ``per_s`` in one channel scope
    (``groups_only``: only in a scope ``scope_of`` calls a group; ``across_channels``: in
    every channel together, one window for the connection, as Slack counts a method's
    calls per workspace)."""

    kinds: tuple[str, ...]
    limit: int
    per_s: float
    groups_only: bool = False
    across_channels: bool = False


class BudgetLimits(Frozen):
    requests: int = 50  # per window, every kind and channel together
    window_s: float = 1.0
    margin_s: float = 0.05  # added to every window: jitter between our clock and the server's
    # A stamped request not answered this long after it left is counted as arrived then.
    in_flight_s: float = 0.25
    reserve: int = 2  # tokens of a window each lower class leaves to the one above it
    channel_rules: tuple[ChannelRule, ...] = ()
    # Kinds the platform does not count against the global limit (Discord: interaction
    # followups, our replies to slash commands); their channel rules still apply.
    global_exempt: tuple[str, ...] = ()


# Discord: 50 requests/s per bot; per channel 5 message sends and 5 edits per 5 s;
# interaction endpoints (a slash command's reply) are outside the global limit. The few
# calls ingress makes itself (a thread for a conversation, a notice) take no token: they
# are counted as they go out (``count_outside``), and 49 leaves one a second for them.
# No margin: a token counts from its answer (or ``in_flight_s`` after it left), which came
# after the request reached Discord, and the next request leaves after its grant: so
# whatever the latency, any second at Discord holds at most ``requests`` of ours.
# One token of reserve a class: a prompt still finds one at once (command replies take
# none: they are exempt). 200 streaming threads then get 47 tokens a second for their
# edits, a turn every ~4.3 s (chat_budget: 48, a 0.05 s margin and a reserve of 2 gave
# them 42, a turn every ~4.8 s, and the worst thread's text fell 5.3 s behind).
DISCORD_BUDGET = BudgetLimits(
    requests=49,
    window_s=1.0,
    margin_s=0.0,
    reserve=1,
    global_exempt=("reply",),
    channel_rules=(
        ChannelRule(kinds=("send",), limit=5, per_s=5.0),
        ChannelRule(kinds=("edit",), limit=5, per_s=5.0),
    ),
)

# Telegram (Bot API FAQ): ~30 messages/s per bot; ~20 a minute in one group (a forum's
# topics share it: the scope is the chat).
TELEGRAM_BUDGET = BudgetLimits(
    requests=30,
    window_s=1.0,
    channel_rules=(
        ChannelRule(kinds=("send", "edit", "reply"), limit=20, per_s=60.0, groups_only=True),
    ),
)

# The FAQ's third figure: about one message a second in one chat, "short bursts" allowed
# (3 in any 3 s, as the fake Telegram enforces it). Not in TELEGRAM_BUDGET: with it, every
# topic of a group shares three calls per 3 s, prompts and replies included (a channel rule
# has no reserve for them), and the Telegram end-to-end flows in one group slowed past their
# time-outs; Telegram answers a burst over it with a 429 whose retry_after holds the chat.
TELEGRAM_CHAT_RULE = ChannelRule(kinds=("send", "edit", "reply"), limit=3, per_s=3.0)


# Slack ("Rate limits", and each method's page): limits are per method per workspace, in
# tiers of calls a minute: chat.update and chat.delete are Tier 3 (50+), the file upload
# calls Tier 4 (100+); chat.postMessage is special: about one message a second in a
# channel, short bursts allowed, and a workspace-wide limit Slack does not publish. Slack
# gives no burst size: 5 in any 5 s (as the fake Slack enforces it) is Discord's
# documented shape for the same rate, and a thread's busiest moment fits in it (the answer
# to its start, the first message of a run and two queued prompts' answers: with 3 in 3 s
# the second answer waited ~3 s, after the run it was queued behind had ended). No global
# window binds (Slack publishes none across methods: ``requests`` is only there to order
# the classes), and a method's tier is a rule across channels.
# The budget takes each tier's documented floor: 50 edits a minute for every channel
# together, however many threads stream (a thread alone edits every 1.2 s,
# ``SLACK_LIMITS``: the same rate).
# Typing (``assistant.threads.setStatus``, "special" limits, unpublished) takes a token
# only when one is to spare. A reply to a command is a post in its channel (an ephemeral
# one is Tier 4: counted as a post all the same, the stricter of the two).
SLACK_BUDGET = BudgetLimits(
    requests=1000,
    window_s=1.0,
    channel_rules=(
        ChannelRule(kinds=("send", "reply"), limit=5, per_s=5.0),
        ChannelRule(kinds=("edit",), limit=50, per_s=60.0, across_channels=True),
        ChannelRule(kinds=("delete",), limit=50, per_s=60.0, across_channels=True),
    ),
)


def telegram_scope(channel_id: str) -> tuple[str, bool]:
    """``tg:<chat>[:<topic>]`` -> (the chat, whether it is a group: a negative chat id)."""
    parts = channel_id.split(":")
    chat = parts[1] if len(parts) > 1 else channel_id
    return f"tg:{chat}", chat.startswith("-")


def slack_scope(channel_id: str) -> tuple[str, bool]:
    """``sl:<channel>:<thread_ts>`` -> (the channel, False): a Slack thread's posts count in
    its channel (``chat.postMessage``'s one a second is the channel's, whatever thread)."""
    parts = channel_id.split(":")
    return (f"sl:{parts[1]}" if len(parts) > 2 else channel_id), False

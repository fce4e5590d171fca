"""The "Memory" part of ``docs/performance.md``: RSS per thread, and where an idle one's goes.

``bench/report.py`` calls ``memory_section`` with the memory section's results
(``bench/memory.py``): the RSS table, then the tracemalloc breakdown of an idle thread
(``bench/memory_sites.py``) as measured now, beside the one measured before issue 18 part 3
(``BEFORE``, kept here: the code it describes is gone).
"""

from __future__ import annotations

from typing import Any

__all__ = ["BEFORE", "MEMORY_RUNS", "PARSERS_BEFORE_AFTER", "memory_section"]

# ``python -m bench.memory_sites 10000`` on the branch point of issue 18 part 3 (main at
# 41b0963, 2026-11-25 13:20 UTC); RSS per idle thread 32.8 KB in the same hour (31.2 KB in
# the last full ``make bench``). (site, code, bytes per thread, what became of it).
BEFORE_TRACED = 31822
BEFORE: list[tuple[str, str, int, str]] = [
    (
        "runtime/live/reactor.py:423",
        "self.send, self.recv = trio.open_memory_channel[tuple[int, list[Effect]]](math.inf)",
        3472,
        "the two lanes' trio channel pairs → one `Inbox` each (`runtime/live/inbox.py`)",
    ),
    (
        "runtime/live/reactor.py:203",
        "async for first in lane.recv:",
        3456,
        "both lane tasks parked in a channel's `receive` → a lane's task starts with its "
        "first effect, and parks on an `Inbox`",
    ),
    (
        "runtime/live/reactor.py:198",
        "async with trio.open_nursery() as lanes:",
        2544,
        "the reactor's task and its lanes' nursery → gone: lanes run in the thread's nursery",
    ),
    (
        "runtime/live/actor.py:127",
        "self._send, self._recv = "
        "trio.open_memory_channel[tuple[Action, Receipt | None]](math.inf)",
        1736,
        "the mailbox's trio channel pair → an `Inbox`",
    ),
    (
        "runtime/live/actor.py:168",
        "self._parked = False  # the actor task waits on an empty mailbox",
        1584,
        "the 31st attribute: CPython gave the actor a dict of its own → `__slots__`",
    ),
    (
        "runtime/live/actor.py:226",
        "action, receipt = await self._recv.receive()",
        1520,
        "the actor task parked in the channel's `receive`, keeping the last action and "
        "receipt → parked on the `Inbox`, keeping nothing",
    ),
    (
        "runtime/live/actor.py:217",
        "async with trio.open_nursery() as nursery:",
        1309,
        "the thread's nursery → kept",
    ),
    (
        "runtime/core/frozen.py:44",
        "values = self.__dict__.copy()",
        1200,
        "the state's and counters' field dicts → kept",
    ),
    (
        "runtime/core/frozen.py:48",
        "self.__pydantic_fields_set__ | update.keys()",
        1160,
        "a fields set per state → shared (one per distinct set)",
    ),
    (
        "runtime/live/reactor.py:200",
        "lanes.start_soon(self._run_lane, self._chat_lane)",
        1139,
        "the chat lane's task → kept, started with its first effect",
    ),
    (
        "runtime/core/transition_step.py:117",
        "F.ReplyToCommand(",
        1080,
        "the `/status` reply, kept by the bench's recording fake chat",
    ),
    (
        "runtime/live/actor.py:344",
        "await self._busy_changed.wait()",
        1048,
        "the ticker task waiting for a run → runs only while a run is active",
    ),
    (
        "runtime/live/reactor.py:199",
        "lanes.start_soon(self._run_lane, self._agent_lane)",
        929,
        "the agent lane's task → not started until the thread talks to an agent",
    ),
    (
        "runtime/live/registry.py:377",
        "backoff=self._backoff(),",
        896,
        "the listener's `Backoff` and its empty deque → a list",
    ),
    (
        "(the rest)",
        "",
        8749,
        "listener events made up front (now when waited for), the registry's task, ...",
    ),
]


# Measured by hand (the section reports one run): the runs of ``python -m bench --only memory``
# on the branch, 2026-11-25 13:00-13:50 UTC, load average 2-5 on 2 shared cores.
MEMORY_RUNS = """\
Runs of `PYTHONPATH=. .venv/bin/python -m bench --only memory` (2026-11-25, load average \
2-5 on 2 shared cores), KB of RSS per thread: **idle 32.8 on the branch point (41b0963) → \
13.2, 13.2 (0.40×)**; after merging main (whose agent listener had grown to 30 attributes: a \
dict of its own per instance, +1.5 KB) 14.4, then with the listener's slots 13.1. Active \
threads (a run in progress): 61.1 in the last full `make bench` → 47.5, 47.4, 48.9, 47.5."""

# Measured by hand: the parser changes of issue 18 part 3, A/B on the shared machine.
PARSERS_BEFORE_AFTER = """\
**Parsers, before and after issue 18 part 3** (2026-11-25 13:10-13:50 UTC, load average 2-6 \
on 2 shared cores; only ratios measured at the same time mean anything here). \
`Frozen.trusted` sets a model's slots through their descriptors: 1.17 → 0.92 µs per \
`TextDelta.trusted` (0.79×; `Counters.replace` 0.77×; `timeit`, best of 15, main's \
checkout and the branch's alternating, 3 rounds each). Gemini `--acp` and `opencode run` \
build their frequent events (deltas, tool cards, the session) with it, after checking the \
one field that was left to pydantic (an `opencode run` text part's id); Claude's session \
line too. A/B of each parser file, main's against the branch's in one process, taking \
turns, 9 pairs (lines per CPU-s, median ratio, min-max): `opencode run` 1.17× \
(0.75-1.64), gemini `--acp` 1.04× (0.99-1.32), claude 1.00× (0.82-1.09). The Claude parser \
as a whole (main's checkout against the branch's, processes taking turns, 9 pairs): 1.08× \
(0.73-1.48). Every parser's events and counters on every recorded fixture equal main's \
(each event's JSON compared). **Claude stream-json stays short of 200,000 lines/s**: \
180,364 (load average 2.0) and 144,434 (4.5) in the last two runs of this section; orjson \
is a quarter of its time, and the rest is spread over its dispatch (no one site above 15%).

**Then past 200,000 lines/s** (h-parsers): `python -m bench._section parsers` on main's \
code (ed04083) and on the branch, taking turns, two runs each (2026-11-25 16:09-16:12 UTC, \
load average 1.6-2.2; lines per CPU-s, mean of the two runs): claude stream-json 192,818 → \
261,624 (1.36×; wall 191,251 → 260,814), codex app-server 278,092 → 363,367 (1.31×), \
gemini `--acp` 235,200 → 309,915 (1.32×); the other parsers, unchanged, 0.99-1.02×. \
`Frozen.builder` makes `trusted` once for one set of fields (0.41 against 0.97 µs per \
`TextDelta`): these three parsers build their deltas and tool cards with it (Claude its \
sessions and turn ends too; codex's deltas and tool cards were validated by pydantic); \
Claude's dispatch is one class table inlined in `feed`; an ACP or codex notification is \
read in place (`read_message`'s checks, no message object). Every `ParsedLine`, counter and parser \
state equals main's on every recorded line and on 93,200 mutated ones (a differential \
check of main's parser files against the branch's)."""


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _code(text: str) -> str:
    escaped = text.replace("|", "\\|")  # a table cell
    return f"`{escaped}`" if text else ""


def memory_section(mem: dict[str, Any]) -> list[str]:
    if not mem or "error" in mem:
        return []
    rss = {k: v for k, v in mem.items() if isinstance(v, dict) and "per_thread_kb" in v}
    rows = [
        [k, f"{v['threads']:,}", v["rss_before_mb"], v["rss_after_mb"], v["per_thread_kb"]]
        for k, v in rss.items()
    ]
    parts = [
        "## Memory",
        "",
        _table(["threads", "count", "RSS before (MB)", "RSS after (MB)", "KB per thread"], rows),
        "",
        MEMORY_RUNS,
        "",
    ]
    sites = mem.get("idle_sites")
    if not sites:
        return parts
    n = sites["threads"]
    parts += [
        f"Where an idle thread's memory goes: tracemalloc over {n:,} idle threads (one "
        "`/status` each, as above; `python -m bench.memory_sites N`), each allocation "
        "charged to the innermost line of Spindle's code that led to it (*via*: the line "
        "that took the memory). Python's own allocations only: RSS adds the allocator's "
        "slack. The bench's chat is the recording fake (`testkit/fake_chat.py`), which "
        "keeps every effect it was shown (the `/status` reply, ~1.4 KB a thread, "
        "`transition_step.py` and `fake_chat.py` below): a platform's renderer keeps its "
        "own state instead, not measured here.",
        "",
        f"**Now: {sites['traced_bytes_per_thread']:,} bytes per idle thread** "
        f"(before issue 18 part 3: {BEFORE_TRACED:,}).",
        "",
        _table(
            ["site", "code", "via", "bytes per thread", "blocks"],
            [
                [
                    s["site"],
                    _code(s["code"]),
                    s["via"],
                    f"{s['bytes_per_thread']:,}",
                    s["blocks_per_thread"],
                ]
                for s in sites["sites"]
            ]
            + [["(the rest)", "", "", f"{sites['rest_bytes_per_thread']:,}", ""]],
        ),
        "",
    ]
    if BEFORE:
        parts += [
            f"**Before: {BEFORE_TRACED:,} bytes per idle thread** (the same measurement on "
            "the branch point, 41b0963):",
            "",
            _table(
                ["site", "code", "bytes per thread", "what it was, and what became of it"],
                [[site, _code(code), f"{size:,}", note] for site, code, size, note in BEFORE],
            ),
            "",
        ]
    return parts

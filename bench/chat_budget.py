"""Many threads streaming against one bot's API budget (issue 18, part 1).

The whole bot (discord.py hosted by trio-asyncio, the live runtime on SQLite, one
``StreamRenderer`` per thread sharing the connection's ``RequestBudget``) against the fake
Discord enforcing Discord's documented limits (``testkit/fake_discord/limits.py``: 50
requests/s for the bot, 5 sends and 5 edits per 5 s per channel, 429s as Discord sends
them), served from a process of its own (``fake_discord.apart``), as Discord is not in the
bot's. ``THREADS`` threads each get a prompt; their agents (in-process, paced by one timer
task: ``AGENT_PACE_S``) start within
``SPREAD_S`` of each other and each streams ``DELTAS`` numbered words (``w0 w1 ...``) at
20 deltas/s, so all of them stream at once for most of the run. Meanwhile each thread
gets one ``/status`` at a random moment. Measured (the limits are enforced from the first
prompt on; setting the threads up is not measured):

- 429 responses the fake sent (target: none);
- a command's reply: ``/status`` issued → its followup arriving at the fake (p99 ≤ 1 s),
  split at the bot's deferral of the interaction (before it: the gateway, discord.py and
  ingress; after it: the runtime, the thread's chat lane, its renderer and the budget);
- visible-text lag: for every word, the time from the agent emitting it to the first
  moment the thread's message showed it (from the fake's log of every post and edit);
  per thread its worst word; the worst thread (target ≤ 5 s);
- requests: all REST calls in the measured window, their rate, the most in any 1 s
  (global-limited calls only) against Discord's 50;
- final text: every thread's answer message reads exactly ``w0 … w{DELTAS-1}`` (a footer
  riding in its last message, as the renderer does while the budget is short, is not part
  of it; how many footers rode is reported);
- the process itself: its CPU time over the run's wall time, how late trio woke a task
  sleeping 0.1 s (the event loop's lag), and the machine's load average: on a shared
  machine a starved process delays everything above, whatever the budget does;
- the budget: tokens by class, the longest wait by class, requests the HTTP trace stamped
  (a token counts from when its request reached Discord, not from when the answer got
  back into trio), posts lifted to ``URGENT`` because a reply waited behind them.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from pathlib import Path

import trio

from bench.common import AGENT_PACE_S, percentile
from threadspindle.agents.base import AgentOptions
from threadspindle.runtime.core import agent_events as E
from threadspindle.runtime.core.effect_types import StartAgent
from threadspindle.runtime.live.timers import Timers
from threadspindle.runtime.live.tuning import tune_gc
from threadspindle.testkit.fake_agent import FakeAgentWorld, ScriptedAgent
from threadspindle.testkit.fake_discord import DiscordRateLimits
from threadspindle.testkit.fake_discord.harness import fake_world, wait_for
from threadspindle.testkit.fake_discord.stack import (
    discord_stack,
    is_footer,
    shows_footer,
    without_footer,
)

__all__ = ["run"]

DELTA_INTERVAL_S = 0.05  # 20 deltas a second
WORD = "w{}"


class WordAgent(ScriptedAgent):
    """Waits its thread's offset, then streams the numbered words on a fixed schedule
    (no drift: each word at start + k/20 s), stamping each with the wall clock."""

    thread_id = ""

    async def _turns(self) -> None:
        world = self.world
        assert isinstance(world, WordWorld)
        async for prompt in self._recv:
            self._turn = (prompt.run_id, trio.CancelScope())
            await self._say(prompt.run_id, E.SessionStarted(session_id=self.session_id or ""))
            await trio.sleep(world.offsets.get(self.thread_id, 0.0))
            times = world.emitted.setdefault(self.thread_id, [])
            start = trio.current_time()
            for k in range(world.deltas):
                await world.pacer.sleep_until(start + k * DELTA_INTERVAL_S)
                times.append(time.time())
                await self._say(prompt.run_id, E.TextDelta(text=WORD.format(k) + " "))
            await self._say(
                prompt.run_id,
                E.TurnCompleted(session_id=self.session_id, cost_usd=0.001, duration_ms=100),
            )
            self._turn = None


class WordWorld(FakeAgentWorld):
    def __init__(self, deltas: int) -> None:
        super().__init__()
        self.deltas = deltas
        self.offsets: dict[str, float] = {}
        self.emitted: dict[str, list[float]] = {}  # thread -> wall time of each word
        # One timer for every agent's words (``trio.sleep_until`` per word took a tenth of
        # the bot's process at 200 threads: the agents' cost, which real agents pay in
        # processes of their own).
        self.pacer = Timers(resolution_s=AGENT_PACE_S)

    def factory(self, start: StartAgent, thread_id: str) -> ScriptedAgent:
        adapter = WordAgent(AgentOptions(), world=self)
        adapter.thread_id = thread_id
        self.adapters.append(adapter)
        return adapter


def _word_index(content: str) -> int:
    """The highest word number a message shows (-1: none)."""
    best = -1
    for token in content.split():
        if token.startswith("w") and token[1:].isdigit():
            best = max(best, int(token[1:]))
    return best


def _lags(
    emitted: list[float], shown: list[tuple[float, int]], final_at: float | None
) -> list[float]:
    """Per word: when it was first shown minus when it was emitted (``shown``: (time,
    highest word shown) in time order). A word never shown counts until ``final_at``."""
    lags: list[float] = []
    visible = -1
    for at, index in shown:
        while visible < index and visible + 1 < len(emitted):
            visible += 1
            lags.append(max(0.0, at - emitted[visible]))
    end = final_at if final_at is not None else time.time()
    lags += [max(0.0, end - t) for t in emitted[visible + 1 :]]
    return lags


async def _start_threads(stack, world, count: int) -> list[int]:
    fake = world.fake
    before = set(fake.threads(world.channel))
    for _ in range(count):
        await trio.to_thread.run_sync(
            lambda: fake.run_command(
                world.channel, world.alice, "claude start", workdir=world.workdir
            )
        )
    threads = await wait_for(
        lambda: set(fake.threads(world.channel)) - before, lambda t: len(t) >= count, 120
    )
    for thread in threads:
        await wait_for(
            lambda thread=thread: stack.runtime.snapshot(str(thread)),
            lambda s: s is not None and s.conversation is not None,
            60,
        )
    return sorted(threads)


async def _measure(threads: int, deltas: int, spread_s: float, tmp: str) -> dict:
    rng = random.Random(18)
    agents = WordWorld(deltas)
    # The fake Discord serves from a process of its own, as Discord does: in the bot's
    # process its request handling took a sixth of the CPU, and every answer waited for
    # the bot to let go of the interpreter's lock.
    with fake_world(tmp, apart=True) as world:
        fake = world.fake
        async with (
            discord_stack(world, Path(tmp), agents=agents, queue_limit=5) as stack,
            trio.open_nursery() as pacing,
        ):
            await pacing.start(agents.pacer.run)
            ids = await _start_threads(stack, world, threads)
            for thread in ids:
                agents.offsets[str(thread)] = rng.uniform(0.0, spread_s)
            await trio.sleep(2.0)  # the start messages settle
            stream_s = deltas * DELTA_INTERVAL_S
            fake.record_contents()
            fake.enforce_rate_limits(DiscordRateLimits())
            calls_before = len(fake.rest_calls())
            began = time.time()
            for thread in ids:
                await trio.to_thread.run_sync(fake.send_message, thread, world.alice, "go")
            commands: list[tuple[int, float]] = []
            loop_lag: list[float] = []
            load_before = os.getloadavg()
            cpu_before = time.process_time()
            done = trio.Event()

            async def watch_the_loop() -> None:
                while not done.is_set():
                    asked = trio.current_time()
                    await trio.sleep(0.1)
                    loop_lag.append(trio.current_time() - asked - 0.1)

            async def status_later(thread: int, delay: float) -> None:
                await trio.sleep(delay)
                asked = time.time()
                iid = await trio.to_thread.run_sync(
                    lambda: fake.run_command(thread, world.alice, "status")
                )
                commands.append((iid, asked))

            async with trio.open_nursery() as watcher:
                watcher.start_soon(watch_the_loop)
                async with trio.open_nursery() as nursery:
                    for thread in ids:
                        delay = rng.uniform(1.0, spread_s + stream_s - 1.0)
                        nursery.start_soon(status_later, thread, delay)
                # Polled from a worker thread, twice a second: a test's ``until_footers``
                # polls the fake every 20 ms from the trio thread, blocking it each time.
                with trio.fail_after(300):
                    for thread in ids:
                        while not any(
                            map(shows_footer, await trio.to_thread.run_sync(fake.messages, thread))
                        ):
                            await trio.sleep(0.5)
                    while any(
                        r.statistics().dirty_messages for r in stack.renderers.renderers.values()
                    ):
                        await trio.sleep(0.5)
                ended = time.time()
                done.set()
            cpu = time.process_time() - cpu_before
            load_after = os.getloadavg()
            budget = stack.renderers.budget
            budget_stats = budget.statistics() if budget is not None else None
            calls = fake.rest_calls()[calls_before:]
            contents = fake.contents()
            messages = {thread: fake.messages(thread) for thread in ids}
            replies, acks, after_ack = [], [], []
            for iid, asked in commands:
                interaction = fake.interaction(iid)
                answered = interaction.followed_up_at
                replies.append(answered[0] - asked if answered else None)
                if interaction.acknowledged_at is not None:
                    acks.append(interaction.acknowledged_at - asked)
                    if answered:
                        after_ack.append(answered[0] - interaction.acknowledged_at)
            limit_stats = fake.rate_limit_statistics()
            pacing.cancel_scope.cancel()
    # -- what a reader saw -------------------------------------------------------------------
    by_thread: dict[int, list[tuple[float, int]]] = {}
    for at, channel, _message, content in contents:
        index = _word_index(content)
        if index >= 0:
            by_thread.setdefault(channel, []).append((at, index))
    worst: dict[int, float] = {}
    all_lags: list[float] = []
    wrong = []
    merged_footers = 0  # footers that rode in the answer's last message (budget short)
    expected = [WORD.format(k) for k in range(deltas)]
    for thread in ids:
        shown = sorted(by_thread.get(thread, []))
        final_at = shown[-1][0] if shown else None
        lags = _lags(agents.emitted.get(str(thread), []), shown, final_at)
        all_lags += lags
        worst[thread] = max(lags, default=float("nan"))
        bot = [
            without_footer(m.content)
            for m in messages[thread]
            if m.author_id == fake.bot_user_id and not is_footer(m) and _word_index(m.content) >= 0
        ]
        merged_footers += sum(1 for m in messages[thread] if shows_footer(m) and not is_footer(m))
        if " ".join(bot).split() != expected:
            wrong.append(thread)
    answered = [r for r in replies if r is not None]
    limited_calls = sorted(
        c.at for c in calls if not c.path.startswith(("/interactions/", "/webhooks/"))
    )
    most = 0
    j = 0
    for i, at in enumerate(limited_calls):
        while limited_calls[j] <= at - 1.0:
            j += 1
        most = max(most, i - j + 1)
    elapsed = ended - began
    worst_thread = max(worst.values(), default=float("nan"))
    result = {
        "threads": threads,
        "deltas_per_thread": deltas,
        "deltas_per_s": round(1 / DELTA_INTERVAL_S),
        "start_spread_s": spread_s,
        "seconds": round(elapsed, 1),
        "responses_429": limit_stats.get("429_global", 0) + limit_stats.get("429_route", 0),
        "responses_429_global": limit_stats.get("429_global", 0),
        "responses_429_route": limit_stats.get("429_route", 0),
        "requests": len(calls),
        "requests_global_limited": len(limited_calls),
        "requests_per_s": round(len(limited_calls) / elapsed, 1),
        "max_requests_in_1s": most,
        "discord_global_limit": 50,
        "reply_samples": len(answered),
        "replies_missing": len(replies) - len(answered),
        "reply_p50_s": round(percentile(answered, 50), 3),
        "reply_p99_s": round(percentile(answered, 99), 3),
        "reply_max_s": round(max(answered, default=float("nan")), 3),
        # the bot's deferral of the command (ingress: gateway -> discord.py -> defer)
        "deferral_p50_s": round(percentile(acks, 50), 3),
        "deferral_p99_s": round(percentile(acks, 99), 3),
        # deferral -> reply: the runtime, the chat lane, the renderer and the budget
        "after_deferral_p50_s": round(percentile(after_ack, 50), 3),
        "after_deferral_p99_s": round(percentile(after_ack, 99), 3),
        "lag_p50_s": round(percentile(all_lags, 50), 2),
        "lag_p99_s": round(percentile(all_lags, 99), 2),
        "worst_thread_lag_s": round(worst_thread, 2),
        "median_thread_worst_lag_s": round(percentile(list(worst.values()), 50), 2),
        "final_texts_wrong": len(wrong),
        "footers_in_the_answer": merged_footers,
        "limits_requests_seen": limit_stats.get("requests", 0),
        "process_cpu_share": round(cpu / elapsed, 2),
        "loop_lag_p50_s": round(percentile(loop_lag, 50), 3),
        "loop_lag_p99_s": round(percentile(loop_lag, 99), 3),
        "load_average_before": [round(x, 1) for x in load_before],
        "load_average_after": [round(x, 1) for x in load_after],
    }
    if budget_stats is not None:
        result["budget"] = {
            "granted_urgent_post_edit": list(budget_stats.granted_by_priority),
            "max_wait_s_urgent_post_edit": [round(w, 2) for w in budget_stats.max_wait_s],
            "typing_granted": budget_stats.typing_granted,
            "typing_refused": budget_stats.typing_refused,
            "refunded": budget_stats.refunded,
            "holds": budget_stats.holds,
            # requests the HTTP trace stamped as they left (counted from their answer, or
            # in_flight_s after they left) / counted from their release (no stamp)
            "stamped": budget_stats.stamped,
            "unstamped": budget_stats.unstamped,
            "answered_early": budget_stats.answered_early,
            # waiting posts lifted to URGENT: a reply was queued behind them (expedite)
            "expedited": budget_stats.expedited,
        }
    return result


def run(quick: bool = False) -> dict:
    # The collector's thresholds ``spindle run`` sets at start-up (``app.run_app``): with
    # CPython's defaults, young and old collections over every thread's state took ~2 s of
    # this process's CPU in a 200-thread run, the longest pause 150 ms.
    tune_gc()
    sizes = [(10, 60, 1.0)] if quick else [(50, 320, 5.0), (200, 320, 5.0)]
    results = {}
    for threads, deltas, spread in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            result = trio.run(_measure, threads, deltas, spread, tmp)
        print(
            f"   {threads} threads: 429s {result['responses_429']}, reply p99 "
            f"{result['reply_p99_s']} s, worst thread lag {result['worst_thread_lag_s']} s, "
            f"{result['requests_per_s']} req/s (max {result['max_requests_in_1s']} in 1 s), "
            f"wrong final texts {result['final_texts_wrong']}, CPU share "
            f"{result['process_cpu_share']}, loop lag p99 {result['loop_lag_p99_s']} s",
            flush=True,
        )
        results[f"{threads}_threads"] = result
    return results

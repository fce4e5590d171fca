"""Latency under load: many active threads streaming agent deltas while users send commands.

Every thread runs a streaming fake agent (in-process) that emits a text delta every 50 ms
(20/s) carrying its emission time. A measuring renderer stamps when each effect is
applied, so ingress->effect latency is measured per delta. Meanwhile each thread gets a
``/queue`` every few seconds (latency to its reply being applied) and, at the end, one
``/abort`` (latency from the command's arrival to the agent's interrupt being applied).

Two main shapes (100 and 1,000 threads), then the same load at the counts between them
(``curve``): where one process stops meeting the targets (p99 ≤ 20 ms both ways).

The in-process agents cost Spindle's process CPU that real agents spend in processes of
their own; Spindle instead pays for reading their pipes. So the largest shape runs once
more with the agents apart (``*_agents_apart``): one farm process (``bench/agent_farm.py``)
writes every thread's Claude Code ``stream_event`` lines into its pipe, and each thread's
agent reads them as an adapter does (``LineReader``, ``ClaudeStreamParser``). Its stamps
are the monotonic clock both processes share.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time

import psutil
import trio

from bench.common import AGENT_PACE_S, bench_runtime, percentile
from threadspindle.agents.claude.parser import ClaudeStreamParser
from threadspindle.effects.process import LineReader
from threadspindle.runtime.core import agent_events as E
from threadspindle.runtime.core.effect_types import (
    KEYED_POSTS,
    AppendOutput,
    Effect,
    PostOutput,
    ReplyToCommand,
    StartAgent,
)
from threadspindle.runtime.live.ports import OnPosted, Posted, RendererPort
from threadspindle.runtime.live.timers import Timers
from threadspindle.testkit.fake_agent import FakeAgentWorld, ScriptedAgent
from threadspindle.testkit.thread_script import ThreadScript

__all__ = ["PipeAgent", "StreamingAgent", "curve", "run"]

DELTA_INTERVAL_S = 0.05
DRAIN_LIMIT_S = 120.0  # an overloaded run reports what it measured instead of waiting on


class StreamingAgent(ScriptedAgent):
    """Streams a stamped delta every 50 ms until interrupted, or until the load period ends
    (``world.stop_at``): an overloaded runtime must not be fed for ever."""

    thread_id = ""

    async def interrupt(self, run_id: str) -> None:
        # When the interrupt reaches the agent: what ``/abort`` -> interrupt measures.
        self.world.interrupted_at.setdefault(self.thread_id, trio.current_time())  # type: ignore[attr-defined]
        await super().interrupt(run_id)

    async def _turns(self) -> None:
        world = self.world
        assert isinstance(world, StreamingWorld)
        async for prompt in self._recv:
            with trio.CancelScope() as scope:
                self._turn = (prompt.run_id, scope)
                await world.go.wait()  # every thread set up first: then the load starts
                await self._stream(prompt.run_id)
            self._turn = None
            if scope.cancelled_caught:
                await self._say(prompt.run_id, E.TurnAborted(reason="interrupted"))
            else:
                await self._say(prompt.run_id, E.TurnCompleted(session_id=self.session_id))

    async def _stream(self, run_id: str) -> None:
        """The turn's deltas, until the load period ends."""
        world = self.world
        assert isinstance(world, StreamingWorld)
        # The agent writes a delta every 50 ms from its own phase on, whether or not
        # Spindle keeps up: what it wrote while nobody read waits in the pipe, and the next
        # read hands all of it over in one go, as a line reader does (the stamp is when it
        # was written). So a process that falls behind is offered the whole load, not fed
        # less. From the turn's start on (a queued prompt's turn after the load says
        # nothing: the load is over).
        due = world.go_at + world.rng.random() * DELTA_INTERVAL_S
        if due < trio.current_time():
            behind = trio.current_time() - due
            due += math.ceil(behind / DELTA_INTERVAL_S) * DELTA_INTERVAL_S
        while due < world.stop_at:
            now = trio.current_time()
            while due <= now and due < world.stop_at:
                world.deltas += 1
                await self._say(run_id, E.TextDelta(text=f"@{due:.6f} "))
                due += DELTA_INTERVAL_S
            await world.pacer.sleep_until(due)


class StreamingWorld(FakeAgentWorld):
    def __init__(self) -> None:
        super().__init__()
        self.go = trio.Event()
        self.pacer = Timers(resolution_s=AGENT_PACE_S)
        self.stop_at = math.inf
        self.go_at = 0.0
        self.rng = random.Random(2)  # each agent's phase
        self.deltas = 0  # text deltas the agents emitted
        self.interrupted_at: dict[str, float] = {}  # thread -> first interrupt received

    def factory(self, start: StartAgent, thread_id: str) -> ScriptedAgent:
        adapter = StreamingAgent(
            self.adapters[0].options if self.adapters else _options(), world=self
        )
        adapter.thread_id = thread_id
        self.adapters.append(adapter)
        return adapter


def _options():
    from threadspindle.agents.base import AgentOptions

    return AgentOptions()


class PipeAgent(StreamingAgent):
    """An agent whose process is apart (``bench/agent_farm.py``): its turn reads the
    thread's pipe the way an adapter reads a CLI's stdout (``LineReader`` over the pipe,
    each line through the real ``ClaudeStreamParser``) and says each text delta; the
    ``result`` line the farm writes when the load ends completes the turn. An interrupt
    closes the pipe (the farm's agent stops)."""

    fd = -1

    async def _stream(self, run_id: str) -> None:
        """The turn's deltas as read from the pipe, until the farm's ``result`` line (a
        prompt queued during the load has its turn after the load, and its pipe, ended:
        that turn says nothing)."""
        world = self.world
        assert isinstance(world, FarmWorld)
        if self.fd < 0:
            return
        parser = ClaudeStreamParser()
        stream = trio.lowlevel.FdStream(self.fd)
        self.fd = -1  # the stream owns it now
        try:
            async for line in LineReader(stream):
                for event in parser.feed(line).events:
                    if isinstance(event, E.TextDelta | E.ThinkingDelta):
                        world.deltas += 1
                        await self._say(run_id, event)
                if line.startswith('{"type":"result"'):
                    return
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()


class FarmWorld(StreamingWorld):
    """Every thread's agent is a pipe written by one farm process (``agent_farm``)."""

    def __init__(self, threads: int) -> None:
        super().__init__()
        self.pipes = [os.pipe() for _ in range(threads)]
        self.farm: subprocess.Popen[str] | None = None
        self._writers: list[int] = []  # the pipes' write ends, the farm's once it started

    def factory(self, start: StartAgent, thread_id: str) -> ScriptedAgent:
        adapter = PipeAgent(self.adapters[0].options if self.adapters else _options(), world=self)
        adapter.thread_id = thread_id
        adapter.fd = self.pipes[int(thread_id[1:])][0]  # thread "t<i>" reads pipe i
        self.adapters.append(adapter)
        return adapter

    def start_farm(self) -> None:
        """The farm process, waiting for its start (``go``); this process keeps only the
        pipes' read ends."""
        writers = [w for _, w in self.pipes]
        self.farm = subprocess.Popen(
            [sys.executable, "-m", "bench.agent_farm"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            pass_fds=writers,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )
        for w in writers:
            os.close(w)
        self._writers = writers

    def go_farm(self, seconds: float) -> None:
        assert self.farm is not None and self.farm.stdin is not None
        go_at = time.perf_counter()
        config = {
            "fds": self._writers,
            "go_at": go_at,
            "stop_at": go_at + seconds,
            "interval": DELTA_INTERVAL_S,
            "phases": [self.rng.random() for _ in self.pipes],
            "session_id": "00000000-0000-4000-8000-000000000000",
        }
        self.farm.stdin.write(json.dumps(config) + "\n")
        self.farm.stdin.flush()

    def farm_report(self) -> dict:
        assert self.farm is not None
        out, _ = self.farm.communicate(timeout=60)
        return json.loads(out.strip().splitlines()[-1]) if out.strip() else {}


class Measurements:
    """What the latency figures need, taken as each effect is applied: a float per delta,
    reply and abort reply. (The tests' recording renderer keeps every effect object; at
    60,000 effects a run that made the collector walk them all in loop stalls of 40-90 ms
    that a real renderer, which drops an effect once applied, never causes.)"""

    def __init__(self) -> None:
        self.on = False  # measuring: the load runs
        # The clock of the deltas' stamps: trio's for agents in this process, the monotonic
        # clock (which a process apart shares) for the farm's.
        self.stamp_clock = trio.current_time
        self.queued_at: dict[str, float] = {}
        self.aborted_at: dict[str, float] = {}
        self.delta: list[float] = []
        self.reply: list[float] = []
        self.abort_reply: list[float] = []
        self._ids = 0

    def renderer(self, thread_id: str) -> MeasuringRenderer:
        return MeasuringRenderer(self)

    def applied(self, effect: Effect) -> list[Posted]:
        now = trio.current_time()
        if self.on:
            if isinstance(effect, (AppendOutput, PostOutput)) and "@" in effect.text:
                # Deltas merged into one action (runtime/live/listener.py) show in one
                # effect: each stamp is one delta, timed from its own emission.
                now = self.stamp_clock()
                for word in effect.text.split():
                    if word.startswith("@"):
                        self.delta.append(now - float(word[1:]))
            elif isinstance(effect, ReplyToCommand) and effect.key in self.queued_at:
                self.reply.append(now - self.queued_at[effect.key])
            elif isinstance(effect, ReplyToCommand) and effect.key in self.aborted_at:
                self.abort_reply.append(now - self.aborted_at[effect.key])
        if isinstance(effect, KEYED_POSTS):
            self._ids += 1
            return [(effect.key, (f"m{self._ids}",))]
        return []


class MeasuringRenderer(RendererPort):
    """A renderer that applies at once and keeps nothing but ``Measurements``. It yields
    where ``StreamRenderer.apply`` does: not for an append (text for a message it edits
    later, in its background task), for anything else (a platform call); and it takes an
    append without waiting (``apply_nowait``), as ``StreamRenderer`` takes one to a
    message it already posted: nearly every append of a long answer."""

    def __init__(self, measurements: Measurements) -> None:
        self.measurements = measurements
        self.on_posted: OnPosted | None = None

    def known(self, key: str, message_ids: tuple[str, ...]) -> None:
        pass

    async def apply(self, effect: Effect) -> list[Posted]:
        if type(effect) is not AppendOutput:
            await trio.lowlevel.checkpoint()
        return self.measurements.applied(effect)

    def apply_nowait(self, effect: Effect) -> list[Posted] | None:
        # As ``StreamRenderer.apply_nowait`` takes an append to a message it posted.
        if type(effect) is not AppendOutput:
            return None
        return self.measurements.applied(effect)

    async def aclose(self) -> list[Posted]:
        await trio.lowlevel.checkpoint()
        return []


async def _load(threads: int, seconds: float, db: str, out_of_process: bool = False) -> dict:
    world = FarmWorld(threads) if out_of_process else StreamingWorld()
    if isinstance(world, FarmWorld):
        world.start_farm()
    async with trio.open_nursery() as nursery:
        if not isinstance(world, FarmWorld):  # (the farm paces its own agents)
            await nursery.start(world.pacer.run)
        try:
            return await _measure(world, threads, seconds, db)
        finally:
            nursery.cancel_scope.cancel()
            if isinstance(world, FarmWorld) and world.farm is not None:
                world.farm.kill()  # (gone already when the load ran to its end)
                world.farm.wait()


async def _measure(world: StreamingWorld, threads: int, seconds: float, db: str) -> dict:
    measured = Measurements()
    farm = world if isinstance(world, FarmWorld) else None
    if farm is not None:
        measured.stamp_clock = time.perf_counter
    async with bench_runtime(db, world=world, renderers=measured, tick_interval_s=1.0) as (
        rt,
        _,
        _,
    ):
        # The users' actions carry the wall clock, as ingress stamps them: the runtime's own
        # actions (ticks, agent events) do, and the core's turn timeout compares the two (a
        # script's made-up clock would time every run out at its first tick).
        scripts = [ThreadScript(f"t{i}", start=time.time()) for i in range(threads)]
        for s in scripts:
            await rt.post(s.start("fake", "/tmp", "/tmp"))
            await rt.post(s.user("stream"))
        await rt.wait_quiet()
        await trio.sleep(0.2)
        measured.on = True
        queued_at, aborted_at = measured.queued_at, measured.aborted_at
        rng = random.Random(1)

        # The abort's reply is applied right after its InterruptAgent (same transition), so
        # its application time bounds abort -> interrupt applied. A tenth of the threads are
        # aborted in the second half of the load, while the others keep streaming.
        abort_from = len(scripts) - max(1, len(scripts) // 10)

        async def users() -> None:
            end = trio.current_time() + seconds
            aborts = iter(scripts[abort_from:])
            while trio.current_time() < end:
                s = rng.choice(scripts[:abort_from] or scripts)
                action = s.queue("later")
                queued_at[f"{s.thread_id}/reply/{action.action_id}"] = trio.current_time()
                await rt.post(action)
                if trio.current_time() > end - seconds / 2:
                    victim = next(aborts, None)
                    if victim is not None:
                        abort = victim.abort()
                        aborted_at[f"{victim.thread_id}/reply/{abort.action_id}"] = (
                            trio.current_time()
                        )
                        await rt.post(abort)
                await trio.sleep(seconds / max(1, threads))

        world.go_at = trio.current_time()
        world.stop_at = world.go_at + seconds

        cpu_started, wall_started = time.process_time(), trio.current_time()
        if farm is not None:
            farm.go_farm(seconds)
            farm_cpu = psutil.Process(farm.farm.pid).cpu_times()  # type: ignore[union-attr]
        world.go.set()
        await users()
        drained = False
        with trio.move_on_after(DRAIN_LIMIT_S):
            await rt.wait_quiet()
            drained = True
        # The process's CPU time from the start of the load until every delta was applied:
        # what one delta costs, whatever share of the machine the other jobs left us.
        cpu_load, wall_load = time.process_time() - cpu_started, trio.current_time() - wall_started
        farm_report: dict = {}
        if farm is not None:
            spent = psutil.Process(farm.farm.pid).cpu_times()  # type: ignore[union-attr]
            farm_cpu_s = spent.user + spent.system - farm_cpu.user - farm_cpu.system
            farm_report = await trio.to_thread.run_sync(farm.farm_report)
            farm_report["cpu_share"] = round(farm_cpu_s / max(1e-9, wall_load), 2)
        if drained:
            await trio.sleep(0.5)
            await rt.wait_quiet()
        delta_lat, reply_lat, abort_reply_lat = measured.delta, measured.reply, measured.abort_reply
        # /abort -> the agent's interrupt() called (the agent lane), and -> its reply shown
        # (the chat lane, behind the run's last part and the typing indicator turned off).
        abort_lat = [
            world.interrupted_at[key.split("/", 1)[0]] - at
            for key, at in aborted_at.items()
            if key.split("/", 1)[0] in world.interrupted_at
        ]
        interrupts = len(world.interrupts)
        actors = [a for a in (rt.get(t) for t in rt.actors()) if a is not None]
        coalesced = sum(a.coalesced_deltas + a.listener.merged_deltas for a in actors)

    def summary(values: list[float]) -> dict:
        ms = [v * 1000 for v in values]
        return {
            "n": len(ms),
            "p50_ms": round(percentile(ms, 50), 2),
            "p99_ms": round(percentile(ms, 99), 2),
            "max_ms": round(max(ms), 2) if ms else None,
        }

    result = {
        "threads": threads,
        "seconds": seconds,
        "delta_rate_per_thread": 1 / DELTA_INTERVAL_S,
        "ingress_to_effect": summary(delta_lat),
        "queue_reply": summary(reply_lat),
        "abort_to_interrupt": summary(abort_lat),
        "abort_reply": summary(abort_reply_lat),
        "interrupts_applied": interrupts,
        "drained_within_limit": drained,
        "deltas": world.deltas,
        # Deltas the agents managed to emit per second, against 20 x threads offered: an
        # overloaded process also slows the (in-process) agents down.
        "deltas_per_s": round(world.deltas / max(1e-9, wall_load)),
        "cpu_us_per_delta": round(cpu_load / max(1, world.deltas) * 1e6, 1),
        "cpu_share": round(cpu_load / max(1e-9, wall_load), 2),
        "load_average": [round(x, 1) for x in os.getloadavg()],
        # Actions committed per delta received: 1.0 without merging; lower when deltas that
        # waited together became one action.
        "delta_actions_per_delta": round((world.deltas - coalesced) / max(1, world.deltas), 3),
    }
    if farm is not None:
        # The agents' process: deltas it wrote, writes that found a pipe full, how late
        # it wrote the latest delta, and its own CPU (on the other core).
        result["agent_farm"] = farm_report
    return result


# The targets for one process: p99 ingress -> effect and p99 /abort -> interrupt.
TARGET_P99_MS = 20.0
# Thread counts between the two shapes, each measured once (``curve``): where one process
# stops meeting the targets.
CURVE_THREADS = (300, 400, 500, 600, 700, 800)
CURVE_SECONDS = 3.0


def _point(result: dict) -> dict:
    """What the curve keeps of one run."""
    return {
        "p99_ms": result["ingress_to_effect"]["p99_ms"],
        "abort_p99_ms": result["abort_to_interrupt"]["p99_ms"],
        "cpu_us_per_delta": result["cpu_us_per_delta"],
        "cpu_share": result["cpu_share"],
        "delta_actions_per_delta": result["delta_actions_per_delta"],
        "deltas_per_s": result["deltas_per_s"],
    }


def _within(point: dict) -> bool:
    abort = point["abort_p99_ms"]
    return point["p99_ms"] <= TARGET_P99_MS and (
        abort is None or math.isnan(abort) or abort <= TARGET_P99_MS
    )


def curve(points: dict[int, dict]) -> dict:
    """The measured points by thread count, and the most threads up to which every point
    met both targets (one run each: a point near the knee can fall either side of it)."""
    within = 0
    for threads in sorted(points):
        if not _within(points[threads]):
            break
        within = threads
    return {
        "points": {str(k): points[k] for k in sorted(points)},
        "target_p99_ms": TARGET_P99_MS,
        "most_threads_within_target": within,
    }


def run(quick: bool) -> dict:
    shapes = [(20, 1.0)] if quick else [(100, 5.0), (1000, 3.0)]
    between = (10, 30) if quick else CURVE_THREADS
    result: dict = {}
    points: dict[int, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for threads, seconds in shapes:
            result[f"{threads}_threads"] = trio.run(
                _load, threads, seconds, os.path.join(tmp, f"lat-{threads}.db")
            )
            points[threads] = _point(result[f"{threads}_threads"])
        # The largest shape again with the agents in a process apart, read through pipes
        # and Claude's parser as in production: what Spindle's process does alone.
        threads, seconds = shapes[-1]
        result[f"{threads}_threads_agents_apart"] = trio.run(
            _load, threads, seconds, os.path.join(tmp, f"lat-{threads}-apart.db"), True
        )
        for threads in between:
            measured = trio.run(
                _load,
                threads,
                1.0 if quick else CURVE_SECONDS,
                os.path.join(tmp, f"curve-{threads}.db"),
            )
            points[threads] = _point(measured)
    result["curve"] = curve(points)
    return result

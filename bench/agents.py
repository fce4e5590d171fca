"""Benchmark section "agents": the genuine CLIs, long-lived process vs one process per turn.

Each CLI from ``.agents`` (``make agents``) is driven through its Spindle adapter against the
project's loopback fake model server (``testkit/fake_model``), with the same settings the
adapter engineers' latency scripts use (``bench/claude_turn_latency.py``,
``bench/gemini_turn_latency.py``, ``bench/opencode_latency.py``,
``tests/agents/test_codex_latency.py``), but one measuring loop for all four, so the
columns mean the same thing for every CLI:

* **warm turn → first event**: ``prompt()`` called → the adapter emits the turn's first
  event, for turns 2..N of one conversation (turn 1 pays start-up in both modes); median.
* **spawn per turn → first event**: the same with ``per_turn=True`` (a fresh process each
  turn, resuming the session); median. **ratio** = spawn-per-turn / long-lived (headline).
* **interrupt → turn end**: on a slow stream, after the first text delta (0.3 s after the
  first event for a mode that sends text only whole, ``codex exec``), ``interrupt()``
  called → the adapter emits ``TurnAborted``/``TurnCompleted``; both modes; median.
* **→ model request**: ``prompt()`` → the CLI's first request of the turn read by the fake
  model server (recorded by an ``ArrivalLog`` standing in for the server's request list).
* **per line: parse → emit**: every event-bearing CLI line of the warm turns, the parser's
  start → the line's first event emitted (p50/p99, µs).
* **Spindle overhead** (long-lived, warm turn): the part of prompt → first event spent in
  Spindle's code rather than in the CLI. Measured inside the same turn:
  ``in`` = ``prompt()`` called → the prompt's bytes are handed to the OS (the last stdin
  ``write_line`` of the prompt returns; for ``opencode serve``, the ``prompt_async`` HTTP
  request is issued), and ``out`` = the parser starts on the first CLI line that yields an
  event → that event is emitted (parse + stamp + emit). Overhead = ``in + out``; the rest
  of prompt → first event (the CLI reading its input, working, writing, the pipe wake-up) is
  the CLI's own warm turn start, reported as ``cli_turn_start_ms``. Hooks are installed on
  the classes (``ManagedProcess.write_line``, ``OpencodeServer.request``, the parsers'
  ``feed``) only while this section runs, and cost a ``perf_counter`` call each.
* **/abort → turn end through the runtime**: a live ``Runtime`` (durable SQLite log, pure
  core, reactor, listener, recording renderer) with the real adapter; ``AbortRequested`` is
  posted mid-stream; measured until the commit whose state has no run any more (the agent's
  ``TurnAborted`` folded in), and until the adapter's ``interrupt()`` was called.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from bench.opencode_latency import OFFLINE_ENV, fake_home
from threadspindle.agents.base import AgentAdapter, AgentOptions, StampedEvent
from threadspindle.agents.claude import ClaudeAdapter
from threadspindle.agents.claude.parser import ClaudeStreamParser
from threadspindle.agents.codex import CodexAdapter
from threadspindle.agents.codex.parser import AppServerParser
from threadspindle.agents.gemini import GeminiAdapter
from threadspindle.agents.gemini.parser import AcpParser
from threadspindle.agents.opencode import OpencodeAdapter
from threadspindle.agents.opencode.parser import OpencodeEventParser
from threadspindle.agents.opencode.server import OpencodeServer
from threadspindle.effects.process import ManagedProcess
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.agent_events import TextDelta, TurnAborted, TurnCompleted
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent

__all__ = ["CLIS", "run"]

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".agents" / "node_modules" / ".bin"
TURN_TIMEOUT_S = 90.0
CLI_BUDGET_S = 240.0  # one CLI's whole measurement (usually 10-120 s): keeps `make bench` bounded
ENDS = (TurnCompleted, TurnAborted)


# --- the four CLIs: fake server and options, as their adapter engineers set them up ---------


def _claude_options(base_url: str, tmp: Path, per_turn: bool) -> AgentOptions:
    return AgentOptions(
        binary=str(BIN / "claude"),
        home=str(tmp / "home"),
        per_turn=per_turn,
        env=(("ANTHROPIC_BASE_URL", base_url), ("ANTHROPIC_API_KEY", "sk-ant-fake")),
    )


def _codex_options(base_url: str, tmp: Path, per_turn: bool) -> AgentOptions:
    # As tests/agents/test_codex_latency.py: a fake provider, no plugins/analytics
    # (which would try the network at start-up).
    provider = (
        f'{{name="Fake",base_url="{base_url}",wire_api="responses",env_key="FAKE_API_KEY",'
        "request_max_retries=0,stream_max_retries=0}"
    )
    extra = (
        "-c", "model=gpt-5.5", "-c", "model_provider=fake",
        "-c", f"model_providers.fake={provider}",
        "-c", "features.plugins=false", "-c", "features.remote_plugin=false",
        "-c", "features.apps=false", "-c", "analytics.enabled=false",
    )  # fmt: skip
    return AgentOptions(
        binary=str(BIN / "codex"),
        extra_args=extra,
        env=(("FAKE_API_KEY", "sk-fake"),),
        home=str(tmp / "home"),
        per_turn=per_turn,
        stop_grace_s=2.0,
    )


def _gemini_options(base_url: str, tmp: Path, per_turn: bool) -> AgentOptions:
    settings = tmp / "home" / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    return AgentOptions(
        binary=str(BIN / "gemini"),
        home=str(tmp / "home"),
        per_turn=per_turn,
        env=(("GOOGLE_GEMINI_BASE_URL", base_url), ("GEMINI_API_KEY", "fake")),
    )


def _opencode_options(base_url: str, tmp: Path, per_turn: bool) -> AgentOptions:
    fake_home(tmp / "home", base_url)
    return AgentOptions(
        binary=str(BIN / "opencode"), home=str(tmp / "home"), env=OFFLINE_ENV, per_turn=per_turn
    )


def _fake_anthropic() -> Any:
    from threadspindle.testkit.fake_model.anthropic import FakeAnthropic

    return FakeAnthropic(slow_delay=0.2)


def _fake_responses() -> Any:
    from threadspindle.testkit.fake_model.openai_responses import OpenAIResponsesFake

    return OpenAIResponsesFake(slow_delay=0.1, slow_chunks=40)


def _fake_gemini() -> Any:
    from threadspindle.testkit.fake_model.gemini import FakeGeminiServer

    return FakeGeminiServer(slow_delay=0.2)


def _fake_chat() -> Any:
    from threadspindle.testkit.fake_model.openai_chat import OpenAIChatFake

    return OpenAIChatFake(slow_delay=0.2, slow_chunks=40)


@dataclass(frozen=True)
class Cli:
    name: str
    adapter: type[AgentAdapter]
    server: Callable[[], Any]  # a fake model server, not started: start() -> base URL
    options: Callable[[str, Path, bool], AgentOptions]


CLIS = [
    Cli("claude", ClaudeAdapter, _fake_anthropic, _claude_options),
    Cli("codex", CodexAdapter, _fake_responses, _codex_options),
    Cli("gemini", GeminiAdapter, _fake_gemini, _gemini_options),
    Cli("opencode", OpencodeAdapter, _fake_chat, _opencode_options),
]


# --- instrumentation ------------------------------------------------------------------------


@dataclass
class Probe:
    """Time marks of the turn in flight (one turn at a time)."""

    run_id: str | None = None
    prompted: float = 0.0  # prompt() called
    prompt_returned: float = 0.0
    writes: list[tuple[float, float]] = field(default_factory=list)  # (began, returned)
    first_feed: float | None = None  # the parser began the first line that yielded events
    line_began: float | None = None  # the last event-bearing line, until its first emit
    line_to_emit: list[float] = field(default_factory=list)  # every line: parse -> emit
    first_event: float | None = None
    first_kind: str | None = None
    first_text: float | None = None
    end: float | None = None
    done: trio.Event = field(default_factory=trio.Event)
    text_seen: trio.Event = field(default_factory=trio.Event)

    def start(self, run_id: str) -> None:
        self.run_id, self.writes = run_id, []
        self.first_feed = self.first_event = self.first_text = self.end = None
        self.done, self.text_seen = trio.Event(), trio.Event()
        self.prompted = time.perf_counter()

    async def emit(self, stamped: StampedEvent) -> None:
        now = time.perf_counter()
        if self.line_began is not None:
            self.line_to_emit.append(now - self.line_began)
            self.line_began = None
        if stamped.run_id != self.run_id:
            return  # a straggler of an earlier turn
        if self.first_event is None:
            self.first_event = now
            self.first_kind = type(stamped.event).__name__
        if isinstance(stamped.event, TextDelta) and self.first_text is None:
            self.first_text = now
            self.text_seen.set()
        if isinstance(stamped.event, ENDS) and self.end is None:
            self.end = now
            self.done.set()

    async def streaming(self) -> None:
        """Until the turn streams text, or (a CLI mode that sends its text only whole, such as
        ``codex exec``) 0.3 s after its first event: the moment to interrupt it."""
        async with trio.open_nursery() as nursery:

            async def settled() -> None:
                while self.first_event is None:
                    await trio.sleep(0.005)
                await trio.sleep(0.3)
                nursery.cancel_scope.cancel()

            async def text() -> None:
                await self.text_seen.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(settled)
            nursery.start_soon(text)

    def overhead(self) -> tuple[float, float, float] | None:
        """(in, out, cli) seconds of the last turn, or None when a mark is missing."""
        if self.first_event is None or self.first_feed is None:
            return None
        writes = [end for began, end in self.writes if began <= self.prompt_returned]
        if not writes:
            return None
        handed = writes[-1]
        spindle_in = handed - self.prompted
        spindle_out = max(0.0, self.first_event - self.first_feed)
        return spindle_in, spindle_out, self.first_event - spindle_in - spindle_out - self.prompted


_FEEDS: list[tuple[type, str]] = [
    (ClaudeStreamParser, "feed"),
    (AppServerParser, "feed"),
    (AcpParser, "feed"),
    (OpencodeEventParser, "feed_event"),
]


@contextmanager
def instrumented(probe: Probe) -> Iterator[None]:
    """Time the prompt's write and the first event-yielding parse, for ``Probe.overhead``."""
    saved: list[tuple[type, str, Any]] = []

    def patch(cls: type, name: str, make: Callable[[Any], Any]) -> None:
        original = cls.__dict__[name]
        saved.append((cls, name, original))
        setattr(cls, name, make(original))

    def timed_write(original: Any) -> Any:
        async def write_line(self: ManagedProcess, line: str) -> None:
            began = time.perf_counter()
            await original(self, line)
            probe.writes.append((began, time.perf_counter()))

        return write_line

    def timed_request(original: Any) -> Any:
        async def request(self: OpencodeServer, method: str, path: str, **kw: Any) -> Any:
            if path.endswith("/prompt_async"):
                now = time.perf_counter()  # the request leaves now; its answer is opencode's time
                probe.writes.append((now, now))
            return await original(self, method, path, **kw)

        return request

    def timed_feed(original: Any) -> Any:
        def feed(self: Any, line: Any) -> Any:
            began = time.perf_counter()
            result = original(self, line)
            if getattr(result, "events", result):
                if probe.first_feed is None:
                    probe.first_feed = began
                probe.line_began = began  # its first event's emit closes the sample
            return result

        return feed

    patch(ManagedProcess, "write_line", timed_write)
    patch(OpencodeServer, "request", timed_request)
    for cls, name in _FEEDS:
        patch(cls, name, timed_feed)
    try:
        yield
    finally:
        for cls, name, original in reversed(saved):
            setattr(cls, name, original)


# --- one adapter, one mode ------------------------------------------------------------------


def _percentile_us(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] * 1e6, 1)


def _median_ms(values: list[float]) -> float | None:
    return round(statistics.median(values) * 1000, 1) if values else None


@dataclass
class Samples:
    first_event: list[float] = field(default_factory=list)
    first_text: list[float] = field(default_factory=list)
    turn_end: list[float] = field(default_factory=list)
    interrupt_to_end: list[float] = field(default_factory=list)
    first_kinds: dict[str, int] = field(default_factory=dict)
    line_to_emit: list[float] = field(default_factory=list)
    to_model: list[float] = field(default_factory=list)  # prompt() -> model request arrived
    prompt_call: list[float] = field(default_factory=list)  # how long prompt() itself took
    spindle_in: list[float] = field(default_factory=list)
    spindle_out: list[float] = field(default_factory=list)
    cli_start: list[float] = field(default_factory=list)
    start_s: float = 0.0
    processes: int | None = None


class ArrivalLog(list):
    """Stands in for a fake model server's ``requests`` list: also notes when each request
    arrived (the server appends from its own thread once the body is read)."""

    def __init__(self, existing: list) -> None:
        super().__init__(existing)
        self.arrived: list[float] = []

    def append(self, item: Any) -> None:
        self.arrived.append(time.perf_counter())
        super().append(item)

    def first_after(self, moment: float) -> float | None:
        return next((t for t in list(self.arrived) if t >= moment), None)


def timed_requests(server: Any) -> ArrivalLog:
    """Install an ``ArrivalLog`` on a fake model server (or the server inside a fake)."""
    inner = getattr(server, "server", server)
    inner.requests = ArrivalLog(inner.requests)
    return inner.requests


async def measure_mode(
    cli: Cli,
    base_url: str,
    per_turn: bool,
    turns: int,
    interrupts: int,
    arrivals: ArrivalLog | None = None,
) -> Samples:
    """Turn 1 (excluded), ``turns`` measured turns, then ``interrupts`` interrupted ones."""
    tmp = Path(tempfile.mkdtemp(prefix=f"spindle-bench-{cli.name}-"))
    (tmp / "home").mkdir()
    (tmp / "work").mkdir()
    work = str(tmp / "work")
    adapter = cli.adapter(cli.options(base_url, tmp, per_turn))
    probe = Probe()
    out = Samples()

    async def turn(run_id: str, text: str) -> None:
        probe.start(run_id)
        await adapter.prompt(PromptAgent(run_id=run_id, text=text, agent=cli.name, workdir=work))
        probe.prompt_returned = time.perf_counter()

    try:
        with instrumented(probe):
            async with trio.open_nursery() as nursery:
                began = time.perf_counter()
                with trio.fail_after(TURN_TIMEOUT_S):
                    await nursery.start(
                        adapter.serve, StartAgent(agent=cli.name, workdir=work), probe.emit
                    )
                out.start_s = time.perf_counter() - began
                for n in range(turns + 1):
                    await turn(f"r{n}", "hello")
                    with trio.fail_after(TURN_TIMEOUT_S):
                        await probe.done.wait()
                    if n == 0 or probe.end is None:
                        continue
                    t0 = probe.prompted
                    assert probe.first_event is not None
                    out.first_event.append(probe.first_event - t0)
                    kind = probe.first_kind or "?"
                    out.first_kinds[kind] = out.first_kinds.get(kind, 0) + 1
                    out.first_text.append((probe.first_text or probe.end) - t0)
                    out.turn_end.append(probe.end - t0)
                    out.prompt_call.append(probe.prompt_returned - t0)
                    asked = arrivals.first_after(t0) if arrivals is not None else None
                    if asked is not None and asked <= probe.end:
                        out.to_model.append(asked - t0)
                    split = probe.overhead()
                    if split is not None and not per_turn:
                        out.spindle_in.append(split[0])
                        out.spindle_out.append(split[1])
                        out.cli_start.append(split[2])
                for i in range(interrupts):
                    await turn(f"s{i}", "SLOWTEST")
                    with trio.fail_after(TURN_TIMEOUT_S):
                        await probe.streaming()
                    asked = time.perf_counter()
                    await adapter.interrupt(f"s{i}")
                    with trio.fail_after(30):
                        await probe.done.wait()
                    assert probe.end is not None
                    out.interrupt_to_end.append(probe.end - asked)
                await adapter.stop()
                out.processes = getattr(adapter, "processes_started", None)
                out.line_to_emit = list(probe.line_to_emit)
                nursery.cancel_scope.cancel()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# --- /abort through the live runtime --------------------------------------------------------


async def abort_through_runtime(cli: Cli, base_url: str, aborts: int) -> dict[str, Any]:
    """``AbortRequested`` posted mid-stream -> the commit that ends the run, through a live
    ``Runtime`` with the real adapter and the genuine CLI."""
    from threadspindle.runtime.core.model import Policy
    from threadspindle.runtime.core.transitions import transition as core_transition
    from threadspindle.runtime.live.log import EventLog
    from threadspindle.runtime.live.registry import open_runtime
    from threadspindle.testkit.fake_chat import RenderWorld

    tmp = Path(tempfile.mkdtemp(prefix=f"spindle-bench-abort-{cli.name}-"))
    (tmp / "home").mkdir()
    (tmp / "work").mkdir()
    options = cli.options(base_url, tmp, False)
    thread = "bench-abort"
    marks: dict[str, float] = {}
    text_seen, run_over = trio.Event(), trio.Event()
    ids = iter(range(1, 1_000_000))

    def transition(state: Any, action: Any) -> Any:
        result = core_transition(state, action)
        if isinstance(action, A.AgentEventReceived) and isinstance(action.event, TextDelta):
            text_seen.set()
        if state.run is not None and result.state.run is None:
            marks.setdefault("run_over", time.perf_counter())
            run_over.set()
        return result

    def factory(start: StartAgent, thread_id: str) -> AgentAdapter:
        adapter = cli.adapter(options)
        original = adapter.interrupt

        async def interrupt(run_id: str) -> None:
            marks.setdefault("interrupt_called", time.perf_counter())
            await original(run_id)

        adapter.interrupt = interrupt  # type: ignore[method-assign]
        return adapter

    def base() -> dict[str, Any]:
        return {"thread_id": thread, "action_id": f"b{next(ids)}", "at": time.time()}

    to_end: list[float] = []
    to_interrupt: list[float] = []
    world = RenderWorld()
    try:
        with EventLog(tmp / "events.sqlite3") as log:
            async with open_runtime(
                log=log,
                renderer_factory=world.renderer,
                adapter_factory=factory,
                policy=Policy(allowed_roots=(str(tmp),)),
                transition=transition,
            ) as runtime:
                work = str(tmp / "work")
                await runtime.post(
                    A.ConversationStarted(
                        **base(), agent=cli.name, requested_workdir=work, resolved_workdir=work
                    )
                )
                run_over = trio.Event()
                await runtime.post(A.UserMessage(**base(), author_id="bench", text="hello"))
                with trio.fail_after(TURN_TIMEOUT_S):
                    await run_over.wait()  # the agent started and answered: it is warm
                for _ in range(aborts):
                    text_seen, run_over = trio.Event(), trio.Event()
                    marks.clear()
                    await runtime.post(A.UserMessage(**base(), author_id="bench", text="SLOWTEST"))
                    with trio.fail_after(TURN_TIMEOUT_S):
                        await text_seen.wait()
                    asked = time.perf_counter()
                    await runtime.post(A.AbortRequested(**base(), author_id="bench"))
                    with trio.fail_after(30):
                        await run_over.wait()
                    to_end.append(marks["run_over"] - asked)
                    if "interrupt_called" in marks:
                        to_interrupt.append(marks["interrupt_called"] - asked)
                    await runtime.wait_quiet(thread)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "abort_to_turn_end_ms": _median_ms(to_end),
        "abort_to_interrupt_call_ms": _median_ms(to_interrupt),
        "aborts_measured": len(to_end),
    }


# --- the section ----------------------------------------------------------------------------


async def measure_cli(
    cli: Cli,
    turns: int,
    per_turn_turns: int,
    interrupts: int,
    per_turn_interrupts: int,
    aborts: int,
) -> dict[str, Any]:
    """Long-lived then per-turn mode against one fake model server, then /abort through the
    runtime; the figures of one CLI."""
    server = cli.server()
    base_url = server.start()
    arrivals = timed_requests(server)
    try:
        warm = await measure_mode(cli, base_url, False, turns, interrupts, arrivals)
        cold = await measure_mode(
            cli, base_url, True, per_turn_turns, per_turn_interrupts, arrivals
        )
        live = await abort_through_runtime(cli, base_url, aborts) if aborts else {}
    finally:
        server.stop()
    ll, pt = _median_ms(warm.first_event), _median_ms(cold.first_event)
    spindle = [a + b for a, b in zip(warm.spindle_in, warm.spindle_out, strict=True)]
    return {
        "long_lived_first_event_ms": ll,
        "per_turn_first_event_ms": pt,
        "ratio": round(pt / ll, 1) if ll and pt else None,
        "interrupt_to_end_ms": _median_ms(warm.interrupt_to_end),
        "per_turn_interrupt_to_end_ms": _median_ms(cold.interrupt_to_end),
        "spindle_overhead_ms": _median_ms(spindle),
        "spindle_in_ms": _median_ms(warm.spindle_in),
        "spindle_out_ms": _median_ms(warm.spindle_out),
        "line_to_emit_us_p50": _percentile_us(warm.line_to_emit, 50),
        "line_to_emit_us_p99": _percentile_us(warm.line_to_emit, 99),
        "line_to_emit_samples": len(warm.line_to_emit),
        "cli_turn_start_ms": _median_ms(warm.cli_start),
        "long_lived_to_model_request_ms": _median_ms(warm.to_model),
        # prompt() returns after the write (claude, gemini), after turn/start's answer
        # (codex), after the prompt_async HTTP answer (opencode): CLI time included there.
        "long_lived_prompt_call_ms": _median_ms(warm.prompt_call),
        "per_turn_to_model_request_ms": _median_ms(cold.to_model),
        "long_lived_first_text_ms": _median_ms(warm.first_text),
        "per_turn_first_text_ms": _median_ms(cold.first_text),
        "long_lived_turn_end_ms": _median_ms(warm.turn_end),
        "per_turn_turn_end_ms": _median_ms(cold.turn_end),
        "long_lived_first_event_all_ms": [round(v * 1000, 1) for v in warm.first_event],
        "per_turn_first_event_all_ms": [round(v * 1000, 1) for v in cold.first_event],
        "interrupt_to_end_all_ms": [round(v * 1000, 1) for v in warm.interrupt_to_end],
        "per_turn_interrupt_to_end_all_ms": [round(v * 1000, 1) for v in cold.interrupt_to_end],
        "long_lived_first_event_kinds": warm.first_kinds,
        "per_turn_first_event_kinds": cold.first_kinds,
        "long_lived_start_s": round(warm.start_s, 2),
        "turns_measured": len(warm.first_event),
        "per_turn_turns_measured": len(cold.first_event),
        "overhead_samples": len(spindle),
        "processes_long_lived": warm.processes,
        "processes_per_turn": cold.processes,
        **live,
    }


async def _bounded(cli: Cli, *counts: int) -> dict[str, Any]:
    with trio.fail_after(CLI_BUDGET_S):
        return await measure_cli(cli, *counts)


def run(quick: bool = False) -> dict[str, Any]:
    """Per CLI: warm first event, spawn-per-turn first event, ratio, interrupt, overhead."""
    missing = [c.name for c in CLIS if not (BIN / c.name).exists()]
    if missing:
        raise RuntimeError(f"agent CLIs missing ({', '.join(missing)}): run `make agents`")
    if quick:  # the smoke run: one CLI, one measured turn each way, one interrupt, one /abort
        return {"claude": trio.run(_bounded, CLIS[0], 2, 1, 1, 0, 1)}
    out: dict[str, Any] = {}
    for cli in CLIS:
        started = time.perf_counter()
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        try:
            out[cli.name] = trio.run(_bounded, cli, 6, 3, 3, 2, 3)
        except Exception as exc:  # one CLI failing must not hide the others' numbers
            out[cli.name] = {"failed": f"{type(exc).__name__}: {exc}"}
        out[cli.name]["seconds"] = round(time.perf_counter() - started, 1)
        out[cli.name]["load_average"] = load
    return out


if __name__ == "__main__":
    import sys

    names = [a for a in sys.argv[1:] if not a.startswith("-")]
    if names:
        CLIS[:] = [c for c in CLIS if c.name in names]
    print(json.dumps(run("--quick" in sys.argv), indent=2))

"""Benchmark section "parsers": agent lines/s through each adapter's parser on real transcripts.

Every parser under ``agents/`` (``*parser.py``) is fed the genuine CLI output recorded in
``tests/agents/fixtures/<cli>/`` (copied from ``shared/fixtures/agent-cli``), the way
its adapter feeds it: one fresh parser per recorded process (a process's stream is stateful:
dedupe of streamed text, known tool ids, the open turn), ``begin_turn`` where the driver sent
a prompt, and for ``opencode serve`` the SSE payload decoded and routed by session first.
The recordings are replayed over and over until ~1M lines (full mode) have gone through, in
several rounds; the figure is the median round's lines/s (wall clock, one core).

Decoded protocol messages from the ``*.dialog.jsonl`` recordings are turned back into lines
once, before the clock starts, in the compact form the CLIs print (``separators=(",", ":")``).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from threadspindle.agents.base import ParserStats
from threadspindle.agents.base.fields import decode_json
from threadspindle.agents.claude.parser import ClaudeStreamParser
from threadspindle.agents.codex.exec_parser import ExecParser
from threadspindle.agents.codex.parser import AppServerParser
from threadspindle.agents.command.parser import CommandLineParser
from threadspindle.agents.gemini.parser import AcpParser
from threadspindle.agents.gemini.stream_parser import StreamJsonParser
from threadspindle.agents.opencode.parser import OpencodeEventParser, session_of
from threadspindle.agents.opencode.run_parser import OpencodeRunParser

__all__ = ["Workload", "workloads", "measure", "run"]

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "agents" / "fixtures"
FULL_LINES = 1_000_000
QUICK_LINES = 2_000
ROUNDS = 5
TARGET_LINES_PER_S = 200_000  # issue 18 (issue 8 asked 100,000)
TIME_CAP_S = 25.0  # per parser: a pathologically slow parser must not stall `make bench`
LONG_ANSWER_DELTAS = (5_000, 20_000)  # 250 KB and 1 MB of answer in one turn

# One recorded process: ("line", text) to feed, ("begin", arg) where the driver prompted.
Step = tuple[str, Any]


@dataclass
class Workload:
    """One parser and the recorded processes it reads; ``replay`` runs one process through a
    fresh parser (or parsers, for a demultiplexed bus) and returns their summed stats."""

    name: str
    sources: list[str]
    processes: list[list[Step]]
    replay: Callable[[list[Step]], ParserStats]
    lines_per_pass: int = field(init=False)
    bytes_per_line: float = field(init=False)

    def __post_init__(self) -> None:
        fed = [v for p in self.processes for kind, v in p if kind == "line"]
        self.lines_per_pass = len(fed)
        self.bytes_per_line = sum(len(v.encode()) for v in fed) / max(1, len(fed))


def _compact(msg: Any) -> str:
    return json.dumps(msg, separators=(",", ":"), ensure_ascii=False)


def _plain_lines(paths: list[Path]) -> list[list[Step]]:
    return [[("line", ln) for ln in p.read_text().splitlines()] for p in paths]


def _files(cli: str, pattern: str) -> list[Path]:
    return sorted((FIXTURES / cli).glob(pattern))


def _sum(stats: list[ParserStats]) -> ParserStats:
    out = ParserStats()
    for s in stats:
        out.lines += s.lines
        out.events += s.events
        out.skipped += s.skipped
        out.malformed += s.malformed
    return out


def _command_turns() -> list[list[Step]]:
    """The generic ``command`` adapter has no CLI to record: its workload is a turn written in
    the protocol ``agents/command/parser.py`` documents (a session, thinking, a tool's start
    and end, plain answer lines, JSON text events, a result), repeated for 20 turns."""
    turn: list[str] = [
        _compact({"type": "session", "id": "s-1", "model": "local"}),
        _compact({"type": "thinking", "text": "Reading the file before changing it."}),
        _compact({"type": "tool_start", "id": "t1", "name": "read", "input": {"path": "a.py"}}),
        _compact({"type": "tool_end", "id": "t1", "result": "def f():\n    return 1\n"}),
    ]
    turn += [f"Line {i} of the answer, plain text as a script prints it." for i in range(12)]
    turn += [_compact({"type": "text", "text": f"chunk {i} "}) for i in range(8)]
    turn.append(_compact({"type": "result", "session_id": "s-1", "cost_usd": 0.0}))
    return [[("line", line) for line in turn * 20]]


# --- replays: what each adapter does with one process's output ------------------------------


def _replay_claude(steps: list[Step]) -> ParserStats:
    parser = ClaudeStreamParser()
    feed = parser.feed
    for _, line in steps:
        feed(line)
    return parser.stats


def _replay_command(steps: list[Step]) -> ParserStats:
    parser = CommandLineParser()
    feed = parser.feed
    for _, line in steps:
        feed(line)
    return parser.stats


def _replay_codex_exec(steps: list[Step]) -> ParserStats:
    parser = ExecParser()
    feed = parser.feed
    for _, line in steps:
        feed(line)
    return parser.stats


def _replay_codex_app_server(steps: list[Step]) -> ParserStats:
    parser = AppServerParser()
    feed = parser.feed
    for _, line in steps:
        feed(line)
    return parser.stats


def _replay_gemini_stream_json(steps: list[Step]) -> ParserStats:
    parser = StreamJsonParser()
    feed = parser.feed
    for _, line in steps:
        feed(line)
    return parser.stats


def _replay_gemini_acp(steps: list[Step]) -> ParserStats:
    parser = AcpParser()
    for kind, value in steps:
        if kind == "line":
            parser.feed(value)
        else:
            parser.session_id, prompt_id = value
            parser.begin_turn(prompt_id)
    return parser.stats


def _replay_opencode_run(steps: list[Step]) -> ParserStats:
    parser = OpencodeRunParser()
    feed = parser.feed
    for _, line in steps:
        feed(line)
    return parser.stats


def _replay_opencode_sse(steps: list[Step]) -> ParserStats:
    """As ``opencode/server.py`` + the adapter: decode the ``data:`` payload once, route it by
    session id, feed the decoded event to that session's parser."""
    parsers: dict[str, OpencodeEventParser] = {}
    unrouted = ParserStats()
    for kind, value in steps:
        if kind == "begin":
            parsers.setdefault(value, OpencodeEventParser(value)).begin_turn()
            continue
        try:
            event = decode_json(value)
        except (ValueError, RecursionError):
            unrouted.lines += 1
            unrouted.malformed += 1
            continue
        sid = session_of(event) if isinstance(event, dict) else None
        if sid is None:
            unrouted.lines += 1
            unrouted.skip("no session")
            continue
        parser = parsers.get(sid)
        if parser is None:
            parser = parsers[sid] = OpencodeEventParser(sid)
        parser.feed_event(event)
    return _sum([unrouted, *(p.stats for p in parsers.values())])


# --- the recordings -------------------------------------------------------------------------


def _dialog_processes(path: Path, prompt_step: Callable[[dict], Step | None]) -> list[list[Step]]:
    """A recorded dialog split per process: the CLI's lines, and a ``begin`` step where our
    side sent what ``prompt_step`` recognises as a prompt."""
    procs: dict[Any, list[Step]] = {}
    for raw in path.read_text().splitlines():
        entry = json.loads(raw)
        steps = procs.setdefault(entry.get("proc"), [])
        msg = entry["msg"]
        if entry["dir"] == "out" and isinstance(msg, dict):
            step = prompt_step(msg)
            if step is not None:
                steps.append(step)
        elif entry["dir"] == "in" and isinstance(msg, dict) and entry.get("chan") in (None, "sse"):
            steps.append(("line", _compact(msg)))
    return [s for s in procs.values() if any(kind == "line" for kind, _ in s)]


def _acp_prompt(msg: dict) -> Step | None:
    if msg.get("method") == "session/prompt":
        return ("begin", (msg["params"]["sessionId"], msg["id"]))
    return None


def _opencode_prompt(msg: dict) -> Step | None:
    path = str(msg.get("path", ""))
    if path.endswith("/prompt_async"):
        return ("begin", path.split("/")[2])
    return None


def _sse_capture(path: Path) -> list[Step]:
    """The raw ``/event`` capture, framed as ``opencode/server.py`` frames it (``data:`` lines up
    to a blank line); a prompt began where a new user message appears."""
    steps: list[Step] = []
    seen: set[str] = set()
    data: list[str] = []
    for line in path.read_text().splitlines() + [""]:
        if line.startswith("data:"):
            data.append(line[5:].lstrip())
            continue
        if line.strip() or not data:
            continue
        payload, data = "\n".join(data), []
        event = json.loads(payload)
        info = event.get("properties", {}).get("info", {})
        if event.get("type") == "message.updated" and info.get("role") == "user":
            if info["id"] not in seen:
                seen.add(info["id"])
                steps.append(("begin", session_of(event)))
        steps.append(("line", payload))
    return steps


# Which parser class each workload measures (the smoke test checks every parser is here).
PARSER_CLASSES: dict[str, type] = {
    "claude stream-json": ClaudeStreamParser,
    "codex app-server": AppServerParser,
    "codex exec --json": ExecParser,
    "gemini --acp": AcpParser,
    "gemini stream-json": StreamJsonParser,
    "opencode serve SSE": OpencodeEventParser,
    "opencode run --format json": OpencodeRunParser,
    "command (generic, synthetic)": CommandLineParser,
}


def workloads() -> list[Workload]:
    claude = [p for p in _files("claude", "claude-*.jsonl") if ".dialog." not in p.name]
    claude_dialogs = _files("claude", "*.dialog.jsonl")
    codex_exec = [p for p in _files("codex", "codex-*.jsonl") if ".dialog." not in p.name]
    codex_dialogs = _files("codex", "*.dialog.jsonl")
    gemini_stream = _files("gemini", "gemini-*.jsonl")
    gemini_dialogs = _files("gemini", "acp-*.dialog.jsonl")
    opencode_run = [
        p
        for p in _files("opencode", "opencode-*.jsonl")
        if "serve" not in p.name and ".dialog." not in p.name
    ]
    opencode_dialog = FIXTURES / "opencode" / "opencode.dialog.jsonl"
    opencode_sse = FIXTURES / "opencode" / "opencode-serve-events.sse"
    return [
        Workload(
            "claude stream-json",
            [p.name for p in claude + claude_dialogs],
            # A dialog recording's CLI lines are its "in" messages (the rest is our side).
            _plain_lines(claude)
            + [s for p in claude_dialogs for s in _dialog_processes(p, lambda m: None)],
            _replay_claude,
        ),
        Workload(
            "codex app-server",
            [p.name for p in codex_dialogs],
            [s for p in codex_dialogs for s in _dialog_processes(p, lambda m: None)],
            _replay_codex_app_server,
        ),
        Workload(
            "codex exec --json",
            [p.name for p in codex_exec],
            _plain_lines(codex_exec),
            _replay_codex_exec,
        ),
        Workload(
            "gemini --acp",
            [p.name for p in gemini_dialogs],
            [s for p in gemini_dialogs for s in _dialog_processes(p, _acp_prompt)],
            _replay_gemini_acp,
        ),
        Workload(
            "gemini stream-json",
            [p.name for p in gemini_stream],
            _plain_lines(gemini_stream),
            _replay_gemini_stream_json,
        ),
        Workload(
            "opencode serve SSE",
            [opencode_dialog.name, opencode_sse.name],
            _dialog_processes(opencode_dialog, _opencode_prompt) + [_sse_capture(opencode_sse)],
            _replay_opencode_sse,
        ),
        Workload(
            "opencode run --format json",
            [p.name for p in opencode_run],
            _plain_lines(opencode_run),
            _replay_opencode_run,
        ),
        Workload(
            "command (generic, synthetic)",
            ["agents/command/parser.py protocol"],
            _command_turns(),
            _replay_command,
        ),
    ]


# --- measuring ------------------------------------------------------------------------------


def _one_round(work: Workload, lines: int) -> tuple[float, float, ParserStats]:
    """Replay the recordings until at least ``lines`` lines went through; (wall seconds, CPU
    seconds of this process, stats). On a shared machine the CPU figure is the parser's own
    cost; the wall figure also counts the time the scheduler gave to other processes."""
    replay, processes = work.replay, work.processes
    totals: list[ParserStats] = []
    fed = 0
    cpu, started = time.process_time(), time.perf_counter()
    while fed < lines:
        for steps in processes:
            stats = replay(steps)
            totals.append(stats)
            fed += stats.lines
    return time.perf_counter() - started, time.process_time() - cpu, _sum(totals)


def json_only_cpu_us(work: Workload, lines: int) -> float:
    """CPU µs per line of the parsers' JSON decoder alone (``decode_json``: orjson) on the
    same lines: the floor under the parsers (the rest of a parser's time is its own).
    Plain-text lines (the generic command's answer lines) are not decoded by any parser, so
    they are left out."""
    fed = [
        v for p in work.processes for kind, v in p if kind == "line" and v.lstrip().startswith("{")
    ]
    loads = decode_json
    done = 0
    cpu = time.process_time()
    while done < lines:
        for line in fed:
            loads(line)
        done += len(fed)
    return (time.process_time() - cpu) * 1e6 / done


@dataclass
class Rounds:
    """One parser's rounds so far."""

    rates: list[float] = field(default_factory=list)  # lines per wall second
    cpu_rates: list[float] = field(default_factory=list)  # lines per CPU second
    totals: list[ParserStats] = field(default_factory=list)
    spent: float = 0.0

    def add(self, work: Workload, lines: int) -> None:
        if self.spent > TIME_CAP_S:
            return
        seconds, cpu_seconds, stats = _one_round(work, max(work.lines_per_pass, lines))
        self.rates.append(stats.lines / seconds)
        self.cpu_rates.append(stats.lines / max(cpu_seconds, 1e-9))
        self.totals.append(stats)
        self.spent += seconds


def measure_all(works: list[Workload], total_lines: int, rounds: int) -> dict[str, Rounds]:
    """``rounds`` rounds of ``total_lines / rounds`` lines per parser, the parsers taking
    turns round by round, so a burst of load from other jobs on the machine is spread over
    all of them instead of falling on one."""
    done = {work.name: Rounds() for work in works}
    for _ in range(rounds):
        for work in works:
            done[work.name].add(work, total_lines // rounds)
    return done


def measure(work: Workload, total_lines: int, rounds: int = ROUNDS) -> dict[str, Any]:
    """Median lines/s over ``rounds`` rounds of ``total_lines / rounds`` lines each."""
    return summarize(work, measure_all([work], total_lines, rounds)[work.name], total_lines)


def summarize(work: Workload, measured: Rounds, total_lines: int) -> dict[str, Any]:
    """The figures of one parser's rounds (and of the decoder alone on the same lines)."""
    rates, cpu_rates = measured.rates, measured.cpu_rates
    total = _sum(measured.totals)
    once = _sum([work.replay(steps) for steps in work.processes])  # one pass, for the ratios
    cpu_us = 1e6 / statistics.median(cpu_rates)
    json_us = json_only_cpu_us(work, max(work.lines_per_pass, total_lines // 10))
    return {
        "lines": total.lines,
        "lines_per_s": round(statistics.median(rates)),
        "min_lines_per_s": round(min(rates)),
        "max_lines_per_s": round(max(rates)),
        "lines_per_cpu_s": round(statistics.median(cpu_rates)),
        "rounds": len(rates),
        "us_per_line": round(1e6 / statistics.median(rates), 2),
        "cpu_us_per_line": round(cpu_us, 2),
        "decoder_cpu_us_per_line": round(json_us, 2),
        "decoder_share": round(min(1.0, json_us / cpu_us), 2),
        "bytes_per_line": round(work.bytes_per_line),
        "mb_per_s": round(statistics.median(rates) * work.bytes_per_line / 1e6, 1),
        "events": total.events,
        "malformed": total.malformed,
        "skipped": total.skipped,
        "recorded_lines": once.lines,
        "recorded_events": once.events,
        "recorded_malformed": once.malformed,
        "recorded_skipped": once.skipped,
        "processes": len(work.processes),
        "sources": work.sources,
    }


def profile(work: Workload, lines: int = 30_000, top: int = 6) -> list[dict[str, Any]]:
    """Where one round's time goes: the ``top`` functions by own time (cProfile), as shares
    of the profiled total (cProfile's own overhead inflates small functions a little)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    _one_round(work, lines)
    profiler.disable()
    stats = pstats.Stats(profiler)
    entries = stats.stats  # type: ignore[attr-defined]  # {(file, line, name): (cc, nc, tt, ct, callers)}
    total = sum(row[2] for row in entries.values()) or 1.0
    rows = sorted(entries.items(), key=lambda kv: -kv[1][2])[:top]
    out = []
    for (path, line, name), (_, calls, own, _cum, _) in rows:
        where = f"{Path(path).name}:{line}({name})" if path != "~" else name
        out.append({"function": where, "share": round(own / total, 3), "calls": calls})
    return out


# --- one long streamed answer: is a parser linear in the length of a turn? -------------------


def _claude_delta(obj: dict) -> str | None:
    event = obj.get("event") if obj.get("type") == "stream_event" else None
    delta = event.get("delta") if isinstance(event, dict) else None
    if isinstance(delta, dict) and delta.get("type") == "text_delta":
        return delta.get("text")
    return None


def _codex_delta(obj: dict) -> str | None:
    if obj.get("method") == "item/agentMessage/delta":
        return (obj.get("params") or {}).get("delta")
    return None


def _acp_delta(obj: dict) -> str | None:
    update = (obj.get("params") or {}).get("update") or {}
    if (
        obj.get("method") == "session/update"
        and update.get("sessionUpdate") == "agent_message_chunk"
    ):
        return (update.get("content") or {}).get("text")
    return None


def _gemini_stream_delta(obj: dict) -> str | None:
    if obj.get("type") == "message" and obj.get("role") == "assistant" and obj.get("delta"):
        return obj.get("content")
    return None


def _opencode_delta(obj: dict) -> str | None:
    if obj.get("type") == "message.part.delta":
        return (obj.get("properties") or {}).get("delta")
    return None


# The streaming formats, and how to find a recorded text delta in each.
STREAMED_TEXT: dict[str, Callable[[dict], str | None]] = {
    "claude stream-json": _claude_delta,
    "codex app-server": _codex_delta,
    "gemini --acp": _acp_delta,
    "gemini stream-json": _gemini_stream_delta,
    "opencode serve SSE": _opencode_delta,
}
CHUNK = "x" * 49 + " "  # 50 bytes of answer per delta


def long_answer(work: Workload, extract: Callable[[dict], str | None], sizes: tuple[int, int]):
    """One turn of ``sizes[0]`` then ``sizes[1]`` text deltas (a recorded delta line, its text
    made 50 bytes) after the recorded lines that lead up to it; CPU seconds of each and the
    growth. A parser linear in the answer's length grows by ``sizes[1] / sizes[0]``."""
    for steps in work.processes:
        for i, (kind, value) in enumerate(steps):
            if kind != "line":
                continue
            try:
                obj = decode_json(value)
            except (ValueError, RecursionError):
                continue
            text = extract(obj) if isinstance(obj, dict) else None
            if text:
                prefix, line = steps[:i], value
                break
        else:
            continue
        break
    else:
        return {"error": "no text delta in the recordings"}
    escaped = json.dumps(text, ensure_ascii=False)[1:-1]
    if line.count(escaped) == 1:
        line, per_delta = line.replace(escaped, CHUNK), len(CHUNK)
    else:
        per_delta = len(text.encode())
    seconds = []
    for n in sizes:
        cpu = time.process_time()
        stats = work.replay([*prefix, *[("line", line)] * n])
        seconds.append(time.process_time() - cpu)
        if stats.events < n:
            return {"error": f"{n} deltas gave only {stats.events} events"}
    small, large = sizes
    return {
        "deltas": list(sizes),
        "answer_kb": [round(n * per_delta / 1024) for n in sizes],
        "cpu_s": [round(t, 3) for t in seconds],
        "us_per_delta": [round(t * 1e6 / n, 1) for t, n in zip(seconds, sizes, strict=True)],
        "growth": round(seconds[1] / max(seconds[0], 1e-9), 1),
        "linear_growth": round(large / small, 1),
    }


def run(quick: bool = False) -> dict[str, Any]:
    """One entry per parser: lines, median lines/s, events, malformed/skipped counts."""
    lines = QUICK_LINES if quick else FULL_LINES
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    works = workloads()
    measured = measure_all(works, lines, 2 if quick else ROUNDS)
    out = {}
    for work in works:
        out[work.name] = row = summarize(work, measured[work.name], lines)
        row["load_average"] = load
        if row["lines_per_cpu_s"] < TARGET_LINES_PER_S or row["lines_per_s"] < TARGET_LINES_PER_S:
            row["profile"] = profile(work, 1_000 if quick else 30_000)
        if work.name in STREAMED_TEXT:
            sizes = (500, 2_000) if quick else LONG_ANSWER_DELTAS
            row["long_answer"] = long_answer(work, STREAMED_TEXT[work.name], sizes)
    return out


def main() -> None:
    import sys

    quick = "--quick" in sys.argv
    for name, row in run(quick).items():
        print(
            f"{name:<28} {row['lines_per_s']:>10,} lines/s  ({row['lines_per_cpu_s']:,} per CPU-s; "
            f"{row['us_per_line']} µs/line; "
            f"{row['lines']:,} lines, {row['events']:,} events, {row['malformed']:,} malformed, "
            f"{row['skipped']:,} skipped)"
        )


if __name__ == "__main__":
    main()

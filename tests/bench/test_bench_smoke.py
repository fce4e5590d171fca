"""Smoke test of the benchmarks: ``python -m bench --quick`` runs every section at tiny sizes
and writes its results and report. It keeps the benchmarks working; it asserts no timings
(numbers on a shared machine say nothing in a test), only that each section produced them.
"""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import SECTIONS
from bench.parsers import PARSER_CLASSES, workloads

ROOT = Path(__file__).resolve().parents[2]
AGENTS_INSTALLED = ROOT / ".agents" / ".installed"

pytestmark = pytest.mark.timeout(300)


def _numbers(node: Any) -> list[float]:
    """Every int/float (not bool) anywhere in a JSON value."""
    if isinstance(node, bool):
        return []
    if isinstance(node, int | float):
        return [node]
    if isinstance(node, dict):
        return [n for v in node.values() for n in _numbers(v)]
    if isinstance(node, list):
        return [n for v in node for n in _numbers(v)]
    return []


def test_quick_bench_fills_every_section_and_writes_the_report(tmp_path: Path) -> None:
    assert AGENTS_INSTALLED.exists(), "run `make agents` first: the agents section needs them"
    # Into a private directory (not bench/out/) so parallel runs cannot clobber each other.
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, f"bench failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

    results = json.loads((tmp_path / "results.json").read_text())
    assert results["quick"] is True
    for name in SECTIONS:
        section = results.get(name)
        assert isinstance(section, dict), f"section {name} missing"
        assert "error" not in section, f"section {name}: {section.get('error')}"
        assert _numbers(section), f"section {name} produced no numbers"
        assert name in results["section_seconds"]

    # The two sections this test's owner wrote: every row carries its figures.
    parsers = results["parsers"]
    assert len(parsers) >= 7  # claude, codex x2, gemini x2, opencode x2
    for name, row in parsers.items():
        assert row["lines"] > 0 and row["events"] > 0, name
        assert row["lines_per_s"] > 0, name
        # Genuine CLI output parses, every line of it: a malformed line here is one the CLI
        # never wrote (a dialog recording's wrapper fed as a line was, until 2026-11-27).
        assert row["recorded_malformed"] == 0, f"{name}: malformed lines"
    for cli, row in results["agents"].items():
        assert "failed" not in row, f"{cli}: {row.get('failed')}"
        for key in (
            "long_lived_first_event_ms",
            "per_turn_first_event_ms",
            "ratio",
            "interrupt_to_end_ms",
            "spindle_overhead_ms",
            "abort_to_turn_end_ms",
        ):
            assert isinstance(row[key], float), f"{cli}.{key} = {row[key]!r}"
    # The latency shape with the agents in a process apart: the farm wrote the deltas and
    # Spindle read them through pipes and Claude's parser. (An aborted thread's reader
    # stops: a line written just before its abort may go unread, and a delta read just
    # after it is dropped by the core.)
    apart = results["latency"]["20_threads_agents_apart"]
    written = apart["agent_farm"]["written"]
    assert 0 < apart["ingress_to_effect"]["n"] <= apart["deltas"] <= written
    assert apart["ingress_to_effect"]["n"] >= 0.9 * written

    report = (tmp_path / "performance.md").read_text()
    assert report.startswith("# Performance")
    for heading in ("## Targets", "## Parsers", "## Agents"):
        assert heading in report
    assert "## Sections that failed" not in report


def test_the_parser_bench_covers_every_agent_parser() -> None:
    """A parser added under ``agents/`` (a ``*parser.py`` module) must get a workload in
    ``bench/parsers.py`` (on its recorded transcripts), or this fails."""
    found = set()
    for path in sorted((ROOT / "agents").glob("**/*parser.py")):
        dotted = ".".join(path.relative_to(ROOT / "agents").with_suffix("").parts)
        module = importlib.import_module(f"threadspindle.agents.{dotted}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and (callable(getattr(cls, "feed", None))):
                found.add(cls)
    assert found, "no parser classes found"
    assert found == set(PARSER_CLASSES.values())
    names = [w.name for w in workloads()]
    assert sorted(names) == sorted(PARSER_CLASSES)
    for work in workloads():
        assert work.lines_per_pass > 0, f"{work.name}: no recorded lines"

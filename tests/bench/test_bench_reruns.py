"""``python -m bench --only``: the page still names the full run, and lists the reruns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.__main__ import main

FULL_RUN = {
    "machine": {"date": "2000-01-01 00:00 UTC", "python": "3", "os": "os", "cpu": "c", "cores": 2},
    "command": "make bench",
    "parsers": {"claude stream-json": {"lines_per_s": 1}},
}


def test_a_section_run_again_is_listed_beside_the_full_run(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps(FULL_RUN))
    for _ in range(2):
        assert main(["--quick", "--only", "core", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    # The other sections' figures are the full run's: its machine line and command stay.
    assert results["machine"] == FULL_RUN["machine"]
    assert results["command"] == "make bench"
    assert results["parsers"] == FULL_RUN["parsers"]
    assert results["core"]["transition"]["calls_per_s"] > 0
    assert [run["sections"] for run in results["reruns"]] == [["core"], ["core"]]
    assert results["reruns"][0]["command"] == "python -m bench --quick --only core"
    page = (tmp_path / "performance.md").read_text()
    assert "2000-01-01 00:00 UTC. Command: `make bench`." in page
    assert page.count("core at ") == 2
    assert "Sections run again since" in page
    assert "**The host (" not in page  # the hand-written note belongs to its own run only


def test_a_section_run_alone_says_so(tmp_path: Path) -> None:
    assert main(["--quick", "--only", "core", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["command"] == "python -m bench --quick --only core"
    assert results["reruns"] == []
    assert (
        "Command: `python -m bench --quick --only core`."
        in (tmp_path / "performance.md").read_text()
    )


def test_a_run_written_elsewhere_leaves_the_repository_page_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A full-size run (no --quick) into --out: its page goes beside its results, and the
    # repository's docs/performance.md and plots stay as they are. (The section itself is
    # run at the quick sizes: what is checked is where the page goes, not the figures.)
    import bench.__main__ as bench_main

    quick_section = bench_main._run_section
    monkeypatch.setattr(bench_main, "_run_section", lambda name, quick: quick_section(name, True))
    docs = bench_main.ROOT / "docs"
    before = {p: p.read_bytes() for p in [docs / "performance.md", *(docs / "perf").glob("*")]}
    assert main(["--only", "core", "--out", str(tmp_path)]) == 0
    assert "Command: `python -m bench --only core`." in (tmp_path / "performance.md").read_text()
    assert {p: p.read_bytes() for p in before} == before
    assert sorted((docs / "perf").glob("*")) == sorted(p for p in before if p.parent.name == "perf")

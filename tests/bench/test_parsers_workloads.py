"""The parser bench's workloads are what the CLIs wrote: every recorded line parses."""

from __future__ import annotations

from bench import parsers


def test_every_recorded_line_is_a_line_the_cli_wrote() -> None:
    # A dialog recording holds both sides wrapped as {"dir", "t", "msg"}; fed as it is, each
    # entry was a malformed line, measured as if a CLI had written it.
    for work in parsers.workloads():
        stats = parsers._sum([work.replay(p) for p in work.processes])
        assert stats.lines == work.lines_per_pass > 0, work.name
        assert stats.malformed == 0, work.name
        assert stats.events > 0, work.name
    claude = next(w for w in parsers.workloads() if w.name == "claude stream-json")
    assert "claude-title.dialog.jsonl" in claude.sources
    fed = [line for p in claude.processes for kind, line in p if kind == "line"]
    assert not any(line.startswith('{"dir"') for line in fed)

"""The phase diagram and the agent-event table in docs/state-machine.md are the ones generated
from the code's tables."""

from __future__ import annotations

import re
from pathlib import Path

from threadspindle.runtime.core.model import Phase
from threadspindle.runtime.core.phase_table import PHASE_EVENTS, PHASE_TABLE, render_mermaid
from threadspindle.runtime.core.transitions_agent import render_agent_event_rules

DOC = Path(__file__).resolve().parents[2] / "docs" / "state-machine.md"


def test_committed_diagram_matches_the_table():
    text = DOC.read_text()
    match = re.search(
        r"<!-- diagram:begin -->\n```mermaid\n(.*?)```\n<!-- diagram:end -->", text, re.S
    )
    assert match, "diagram markers missing from docs/state-machine.md"
    assert match.group(1) == render_mermaid(), (
        "docs/state-machine.md is stale: paste the output of "
        "`.venv/bin/python -m threadspindle.runtime.core.phase_table` between the diagram markers"
    )


def test_committed_agent_event_table_matches_the_rules():
    text = DOC.read_text()
    match = re.search(r"<!-- agent-events:begin -->\n(.*?)<!-- agent-events:end -->", text, re.S)
    assert match, "agent-event table markers missing from docs/state-machine.md"
    assert match.group(1) == render_agent_event_rules(), (
        "docs/state-machine.md is stale: paste the output of "
        "`.venv/bin/python -m threadspindle.runtime.core.transitions_agent` between the "
        "agent-events markers"
    )


def test_table_covers_every_phase_and_only_known_events():
    assert set(PHASE_TABLE) == set(Phase)
    for moves in PHASE_TABLE.values():
        assert set(moves) <= set(PHASE_EVENTS)
    # every active phase can end
    for phase in (Phase.DISPATCHING, Phase.RUNNING, Phase.INTERRUPTING):
        assert PHASE_TABLE[phase]["turn_end"] is Phase.IDLE

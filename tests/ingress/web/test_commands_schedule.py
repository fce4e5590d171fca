"""The web chat's typed ``/schedule`` and ``/verbosity`` lines -> their actions."""

from __future__ import annotations

import pytest

from threadspindle.ingress.input_checks import InputRefused
from threadspindle.ingress.web.commands import line_action
from threadspindle.runtime.core import actions as A


def test_schedule_and_verbosity_lines() -> None:
    added = line_action(None, "w1", "a1", 1000.0, "/schedule in 20m check the CI")
    assert isinstance(added, A.ScheduleAdded)
    assert (added.due_at, added.text, added.cron) == (2200.0, "check the CI", None)
    listed = line_action(None, "w1", "a2", 1000.0, "/schedule list")
    assert isinstance(listed, A.SchedulesListed)
    cancelled = line_action(None, "w1", "a3", 1000.0, "/schedule cancel s2")
    assert isinstance(cancelled, A.ScheduleCancelled) and cancelled.schedule_id == "s2"
    level = line_action(None, "w1", "a4", 1000.0, "/verbosity tools")
    assert isinstance(level, A.VerbositySet) and level.verbosity == "tools"
    with pytest.raises(InputRefused, match="usage: /verbosity"):
        line_action(None, "w1", "a5", 1000.0, "/verbosity loud")

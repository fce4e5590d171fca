"""``spindle status``'s table (``app/status.py``): thread ids whole, columns aligned by the
cells a terminal gives each character, nothing that could drive the terminal."""

from __future__ import annotations

from rich.cells import cell_len

from threadspindle.app.status import ThreadRow, format_status
from threadspindle.runtime.core.model import ThreadState


def test_thread_ids_are_whole_and_the_columns_line_up() -> None:
    ids = ["console:" + "n" * 40, "console:日本語", "1234567890123456789", "console:a\x1b[2Jb"]
    table = format_status([ThreadRow(i, ThreadState.new(i), 0) for i in ids])
    lines = table.splitlines()
    # Cut to 24 characters, a long id could not be given to `spindle log export`.
    assert lines[2].startswith("console:" + "n" * 40 + " ")
    assert "\x1b" not in table and "console:ab " in table  # the escape sequence removed
    # Each row's "idle" starts at the same cell, wide characters or not.
    starts = {cell_len(line[: line.index(" idle")]) for line in lines[2:]}
    assert len(starts) == 1
    assert cell_len(lines[0][: lines[0].index(" phase")]) == starts.pop()

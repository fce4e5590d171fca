"""The turn codex runs for a `!` command (``thread/shellCommand``), picked out of the
app-server's stream.

Codex runs the command with its own shell as a turn of its own (``source: userShell``); its
lines are told to the caller of ``CodexAdapter.shell`` (output deltas, the exit code), not
emitted as agent events. ``ShellTurn.take`` claims the first ``turn/started`` after the
command was asked for (prompts wait meanwhile), then every line of that turn.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import trio

__all__ = ["ShellTurn"]


class ShellTurn:
    """The turn codex runs for ``thread/shellCommand``: the first ``turn/started`` after it
    is asked for (prompts wait meanwhile), then every line of that turn."""

    def __init__(self, output: Callable[[str], None]) -> None:
        self.output = output
        self.turn: str | None = None
        self.exit_code: int | None = None
        self.done = trio.Event()

    def take(self, line: str) -> bool:
        """True when ``line`` belongs to the shell's turn (and was handled here)."""
        if '"turn' not in line:
            return False  # neither a turn's notification nor one of its items
        try:
            message = json.loads(line)
        except ValueError:
            return False
        params = message.get("params") if isinstance(message, dict) else None
        if not isinstance(params, dict):
            return False
        method = message.get("method")
        turn = params.get("turn")
        turn_id = params.get("turnId") or (turn.get("id") if isinstance(turn, dict) else None)
        if method == "turn/started" and self.turn is None and isinstance(turn_id, str):
            self.turn = turn_id
            return True
        if turn_id is None or turn_id != self.turn:
            return False
        if method == "item/commandExecution/outputDelta":
            delta = params.get("delta")
            if isinstance(delta, str):
                self.output(delta)
        elif method == "item/completed":
            item = params.get("item")
            if isinstance(item, dict) and item.get("type") == "commandExecution":
                code = item.get("exitCode")
                self.exit_code = code if isinstance(code, int) else None
        elif method == "turn/completed":
            self.done.set()
        return True

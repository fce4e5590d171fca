"""Replay of recorded event logs: JSONL export, and the fold that prints effects.

A thread's log exported as JSONL (``export_thread``; the format is documented in
docs/log-format.md) can be folded through the same pure ``transition`` the runtime uses
(``replay_file``): it yields the effects each action produced, as one canonical JSON line
each (sorted keys, no spaces, so equal effects are equal bytes) or as a readable
transcript. ``check`` diffs a replay against an expected file. Replay never performs an
effect: it only folds and prints.

Every line carries the format version (``"v"``). Readers keep an upgrader for each older
version, so a log written by an older Spindle still replays; a line from a newer version
is refused with a clear error.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from threadspindle.runtime.core.actions import Action
from threadspindle.runtime.core.model import ThreadState
from threadspindle.runtime.live.log_read import ACTION_ADAPTER, LogReader, open_read_only

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "check",
    "effect_lines",
    "export_thread",
    "read_jsonl",
    "replay_actions",
    "replay_file",
    "replay_lines",
    "transcript_lines",
]

FORMAT = "spindle-log"
FORMAT_VERSION = 1

# Upgraders from version n to n+1, applied to a parsed line dict. Version 1 is the first.
_UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


# --- export ------------------------------------------------------------------------------


def export_lines(
    rows: Iterable[tuple[int, float, dict[str, Any]]], thread_id: str
) -> Iterator[str]:
    for seq, at, action in rows:
        yield _canonical(
            {
                "format": FORMAT,
                "v": FORMAT_VERSION,
                "thread_id": thread_id,
                "seq": seq,
                "at": at,
                "action": action,
            }
        )


def export_thread(db_path: str | os.PathLike[str], thread_id: str, out: TextIO) -> int:
    """Write the thread's log as JSONL to ``out``; returns the number of lines. Opens the
    database read-only (a running Spindle may keep writing). Every row is checked before a
    line is written (``runtime.live.log_read``), so a log that cannot be exported whole writes
    nothing. Raises FileNotFoundError when there is no database, KeyError when the thread
    has no action in it, ``LogError`` (``LogCorrupt`` naming the thread and seq) when it
    cannot be read."""
    path = Path(db_path)
    conn = open_read_only(path)
    try:
        reader = LogReader(conn, path)
        if sum(1 for _ in reader.export_rows(thread_id)) == 0:  # checks every row first
            raise KeyError(thread_id)
        count = 0
        for line in export_lines(reader.export_rows(thread_id), thread_id):
            out.write(line + "\n")
            count += 1
    finally:
        conn.close()
    return count


# --- reading -----------------------------------------------------------------------------


def read_jsonl(lines: Iterable[str], source: str = "<log>") -> Iterator[tuple[int, Action]]:
    """Parse exported lines into (seq, action), upgrading older versions. An export holds
    one thread's actions in order: a line of another thread, or a seq that does not grow,
    is a ``ValueError`` naming the line (folded into the first thread, another thread's
    actions gave a state neither thread ever had, and said nothing); so is an action at a
    time no clock gives (NaN, or ``1e308``: a timeline's spans became infinite)."""
    thread: str | None = None
    last_seq: int | None = None
    for n, seq, action in _records(lines, source):
        if thread is None:
            thread = action.thread_id
        elif action.thread_id != thread:
            raise ValueError(
                f"{source}:{n}: an action of thread {action.thread_id!r:.80} in a file of "
                f"thread {thread!r:.80}: export one thread per file"
            )
        if not 0.0 <= action.at <= LATEST_AT:
            raise ValueError(
                f"{source}:{n}: action {action.action_id} is at {action.at!r}, not a time "
                "between 1970 and 9999"
            )
        if last_seq is not None and seq <= last_seq:
            raise ValueError(
                f"{source}:{n}: seq {seq} after seq {last_seq}: the lines are out of order "
                "or repeated"
            )
        last_seq = seq
        yield seq, action


LATEST_AT = 253_402_300_799.0  # 9999-12-31 23:59:59 UTC: the last second a date shows


def _records(lines: Iterable[str], source: str) -> Iterator[tuple[int, int, Action]]:
    """(line number, seq, action) of each line that is not blank."""
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"{source}:{n}: not JSON: {exc}") from None
        except RecursionError:  # json's parser recurses per level: a line of "[[[[..." ends it
            raise ValueError(f"{source}:{n}: JSON nested too deeply") from None
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            raise ValueError(f"{source}:{n}: not a {FORMAT} line")
        version = record.get("v")
        if not isinstance(version, int) or version < 1:
            raise ValueError(f"{source}:{n}: bad format version {version!r}")
        if version > FORMAT_VERSION:
            raise ValueError(
                f"{source}:{n}: format version {version} is newer than this Spindle "
                f"reads ({FORMAT_VERSION})"
            )
        while version < FORMAT_VERSION:
            record = _UPGRADES[version](record)
            version += 1
        try:
            action = ACTION_ADAPTER.validate_python(record["action"])
        except (KeyError, ValueError) as exc:
            raise ValueError(f"{source}:{n}: bad action: {exc}") from None
        except RecursionError:  # an action nested deeper than validation can follow
            raise ValueError(f"{source}:{n}: bad action: nested too deeply") from None
        yield n, _seq_of(record, n, source), action


def _seq_of(record: dict[str, Any], n: int, source: str) -> int:
    """The line's ``seq`` (the line number when it has none); ``ValueError`` naming the line
    when it is not an integer (``int()`` of a list or an object raised a bare TypeError)."""
    seq = record.get("seq", n)
    # Only an integer (an export writes one): ``int()`` took 3.9 for 3, "3" for 3, true for
    # 1, and raised OverflowError, uncaught, for 1e999.
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise ValueError(f"{source}:{n}: bad seq {seq!r:.60}")
    return seq


# --- the fold ----------------------------------------------------------------------------


def replay_actions(actions: Iterable[tuple[int, Action]]) -> Iterator[tuple[int, Action, Any]]:
    """Fold (seq, action) pairs through ``transition`` from the empty state of their thread;
    yields (seq, action, Transition)."""
    from threadspindle.runtime.core.transitions import transition

    state: ThreadState | None = None
    for seq, action in actions:
        if state is None:
            state = ThreadState.new(action.thread_id)
        result = transition(state, action)
        state = result.state
        yield seq, action, result


def effect_lines(folded: Iterable[tuple[int, Action, Any]]) -> Iterator[str]:
    for seq, action, result in folded:
        for effect in result.effects:
            yield _canonical(
                {"seq": seq, "action": action.kind, "effect": effect.model_dump(mode="json")}
            )


def _short(text: str, limit: int = 120) -> str:
    text = text.replace("\n", "⏎")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _describe_action(action: Action) -> str:
    data = action.model_dump(mode="json", exclude={"thread_id", "action_id", "at", "kind"})
    if action.kind == "agent_event":
        event = data.pop("event")
        return f"agent {event.pop('type')} run={data['run_id']} {_short(_canonical(event), 80)}"
    if "text" in data:
        return f"{_short(data['text'], 80)!r}"
    return _short(_canonical(data), 100) if data else ""


def _describe_effect(effect: Any) -> str:
    data = effect.model_dump(mode="json")
    kind = data.pop("type")
    key = data.pop("key", None)
    text = data.pop("text", None)
    parts = [kind] + ([key] if key else [])
    if text is not None:
        parts.append(repr(_short(text, 100)))
    rest = {k: v for k, v in data.items() if v not in (None, (), [], "")}
    if rest:
        parts.append(_short(_canonical(rest), 100))
    return " ".join(parts)


def transcript_lines(folded: Iterable[tuple[int, Action, Any]]) -> Iterator[str]:
    """A readable story: each action, then the effects it caused (and why it was ignored)."""
    for seq, action, result in folded:
        yield f"#{seq} {action.kind} {_describe_action(action)}".rstrip()
        for effect in result.effects:
            yield f"    -> {_describe_effect(effect)}"
        if result.note:
            yield f"    (note: {result.note})"


def replay_file(path: str | os.PathLike[str], transcript: bool = False) -> list[str]:
    """The effects of replaying the JSONL log at ``path``, one line each (or a transcript).
    Raises OSError when it cannot be read and ValueError when a line is not valid."""
    return list(replay_lines(path, transcript))


def replay_lines(path: str | os.PathLike[str], transcript: bool = False) -> Iterator[str]:
    """``replay_file``'s lines one at a time, as the file is read: memory stays that of the
    thread's state, whatever the file's size (a list of them was ~3x the file). The errors
    come where they are met."""
    source = str(path)
    with open(path, encoding="utf-8") as f:
        folded = replay_actions(read_jsonl(f, source))
        yield from transcript_lines(folded) if transcript else effect_lines(folded)


def check(
    path: str | os.PathLike[str], expected: str | os.PathLike[str], transcript: bool = False
) -> list[str]:
    """A unified diff between the expected lines and the replay (empty when equal)."""
    got = replay_file(path, transcript)
    want = Path(expected).read_text(encoding="utf-8").splitlines()
    return list(difflib.unified_diff(want, got, str(expected), f"replay of {path}", lineterm=""))

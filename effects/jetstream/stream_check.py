"""Whether a ``SPINDLE`` stream that already exists can hold the thread logs.

``open_jetstream`` creates the stream with the settings the log relies on. When a stream of
that name exists with other settings (made by hand, or by a runner asking for fewer
replicas), JetStream refuses to create it again and the runner uses it as it is. Most
differences are harmless (wider subjects, direct gets off); some are not, and used as they
are they failed late and silently: subjects that do not take ``spindle.thread.<t>.log``
left every claim waiting 30 s on "no responders"; limits, a retention other than limits, or
memory storage would drop a thread's history without a word. ``stream_problems`` names
each such setting, so the runner can refuse to start with a sentence instead.
"""

from __future__ import annotations

from nats.js.api import RetentionPolicy, StorageType, StreamConfig

__all__ = ["stream_problems", "subject_covers"]


def subject_covers(filter_subject: str, pattern: str) -> bool:
    """True when every subject ``pattern`` matches (its ``*`` tokens standing for any
    token) also matches the stream subject ``filter_subject``."""
    have, want = filter_subject.split("."), pattern.split(".")
    for i, token in enumerate(have):
        if token == ">":
            return len(want) > i  # ">" takes one or more tokens
        if i >= len(want):
            return False
        if token == "*":
            continue
        if want[i] != token:  # (a "*" in the pattern is taken only by "*" or ">")
            return False
    return len(have) == len(want)


def _name(setting: object) -> str:
    # nats-py leaves the enums of a stream read back from the server as plain strings.
    return str(getattr(setting, "value", setting))


def _limited(value: int | float | None) -> bool:
    # nats-py reads "no limit" as -1 (or 0 for an age), and leaves unset fields None.
    return value is not None and value > 0


def stream_problems(config: StreamConfig, *, subjects: str, max_payload: int) -> list[str]:
    """What in the existing stream's ``config`` would lose, refuse or strand a log's
    writes; empty when the log can use it. ``subjects``: the pattern of the log's subjects;
    ``max_payload``: the servers' own cap on a message. (Fewer replicas than asked is not
    among them: the log works, with less to survive a node's loss; the caller warns.)"""
    problems: list[str] = []
    have = list(config.subjects or [])
    if not any(subject_covers(f, subjects) for f in have):
        problems.append(f"its subjects ({', '.join(have) or 'none'}) do not take {subjects}")
    if config.mirror is not None:
        problems.append("it mirrors another stream, so it takes no writes")
    if config.sealed:
        problems.append("it is sealed, so it takes no writes")
    if config.no_ack:
        problems.append("it does not acknowledge writes (no_ack)")
    if config.subject_transform is not None:
        problems.append("it rewrites the subjects it stores (subject_transform)")
    if config.storage is not None and _name(config.storage) != StorageType.FILE.value:
        problems.append(
            f"it keeps its messages in {_name(config.storage)}: a restart of the servers "
            "would lose every thread's log"
        )
    if config.retention is not None and _name(config.retention) != RetentionPolicy.LIMITS.value:
        problems.append(
            f"its retention is {_name(config.retention)!r}: messages would be deleted once read"
        )
    limits = [
        (config.max_msgs, "at most {} messages"),
        (config.max_msgs_per_subject, "at most {} messages a thread"),
        (config.max_bytes, "at most {} bytes"),
    ]
    kept = [text.format(value) for value, text in limits if _limited(value)]
    if _limited(config.max_age):
        kept.append(f"messages for {config.max_age:g} s")
    if kept:
        problems.append(f"it keeps {' and '.join(kept)}: older history would be lost")
    size = config.max_msg_size
    if size is not None and 0 < size < max_payload:
        problems.append(f"it refuses messages over {size} bytes (the servers take {max_payload})")
    return problems

"""Whether a stream or KV bucket that already exists can do what Spindle makes it for.

``open_jetstream`` and ``open_transport`` create their streams and buckets with the
settings Spindle relies on. When one of that name exists with other settings (made by
hand, or by a runner asking for fewer replicas), JetStream refuses to create it again and
Spindle uses it as it is. Most differences are harmless (wider subjects, direct gets off);
some are not, and used as they were they failed late and silently: subjects that do not
take ``spindle.thread.<t>.log`` left every claim waiting 30 s on "no responders"; limits,
a retention other than limits, or memory storage would drop a thread's history, or a
prompt queued for a runner, without a word; a routes bucket whose keys expire would
forget which root a thread belongs to, a root leases bucket with another TTL than the
leases' would have its leases judged by the wrong clock. ``stream_problems`` and
``kv_problems`` name each such setting, and ``unusable`` makes the sentence a runner or a
gateway stops with.
"""

from __future__ import annotations

from collections.abc import Collection

from nats.js.api import RetentionPolicy, StorageType, StreamConfig

__all__ = [
    "kv_problems",
    "stream_problems",
    "subject_covers",
    "subjects_overlap",
    "unusable",
]


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


def subjects_overlap(first: str, second: str) -> bool:
    """True when some subject matches both filters (a work queue stream refuses a
    consumer whose filter overlaps another consumer's)."""
    a, b = first.split("."), second.split(".")
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x is None or y is None:
            return False
        if x == ">" or y == ">":
            return True  # the other has a token here, and ">" takes it and the rest
        if x != y and "*" not in (x, y):
            return False
    return True


def _name(setting: object) -> str:
    # nats-py leaves the enums of a stream read back from the server as plain strings.
    return str(getattr(setting, "value", setting))


def _limited(value: int | float | None) -> bool:
    # nats-py reads "no limit" as -1 (or 0 for an age), and leaves unset fields None.
    return value is not None and value > 0


def stream_problems(
    config: StreamConfig,
    *,
    subjects: str,
    max_payload: int,
    retentions: Collection[RetentionPolicy] = (RetentionPolicy.LIMITS,),
) -> list[str]:
    """What in the existing stream's ``config`` would lose, refuse or strand its writes;
    empty when Spindle can use it. ``subjects``: the pattern of the subjects written;
    ``max_payload``: the servers' own cap on a message; ``retentions``: the ones that keep
    every message until each of its readers has it. (Fewer replicas than asked is not
    among them: it works, with less to survive a node's loss; the caller warns.)"""
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
            "would lose all it holds"
        )
    allowed = [policy.value for policy in retentions]
    if config.retention is not None and _name(config.retention) not in allowed:
        # Interest drops what no consumer wants yet (a prompt for a runner not up yet); a
        # work queue deletes what one consumer acked (a thread's log is read again).
        problems.append(
            f"its retention is {_name(config.retention)!r}, not "
            f"{' or '.join(repr(a) for a in allowed)}: messages would be deleted before "
            "every reader has them"
        )
    limits = [
        (config.max_msgs, "at most {} messages"),
        (config.max_msgs_per_subject, "at most {} messages a subject"),
        (config.max_bytes, "at most {} bytes"),
    ]
    kept = [text.format(value) for value, text in limits if _limited(value)]
    if _limited(config.max_age):
        kept.append(f"messages for {config.max_age:g} s")
    if kept:
        problems.append(f"it keeps {' and '.join(kept)}: older messages would be lost")
    size = config.max_msg_size
    if size is not None and 0 < size < max_payload:
        problems.append(f"it refuses messages over {size} bytes (the servers take {max_payload})")
    return problems


def kv_problems(config: StreamConfig, *, ttl: float | None) -> list[str]:
    """What in an existing KV bucket's ``config`` (its stream's) would lose or misjudge its
    keys. ``ttl``: the TTL its keys must have (a lease's), or None when they must be kept
    until deleted (a thread's route or home)."""
    problems: list[str] = []
    age = config.max_age or 0.0
    if ttl is None:
        if age > 0:
            problems.append(f"its keys expire after {age:g} s")
    elif abs(age - ttl) > 1e-3:
        problems.append(
            f"its TTL is {age:g} s where the leases' is {ttl:g} s"
            if age > 0
            else f"it has no TTL where the leases' is {ttl:g} s"
        )
    if config.storage is not None and _name(config.storage) != StorageType.FILE.value:
        problems.append(
            f"it keeps its keys in {_name(config.storage)}: a restart of the servers would "
            "lose them"
        )
    limits = [(config.max_msgs, "at most {} values"), (config.max_bytes, "at most {} bytes")]
    kept = [text.format(value) for value, text in limits if _limited(value)]
    if kept:
        problems.append(f"it keeps {' and '.join(kept)}: older keys would be lost")
    return problems


def unusable(stream: str, problems: list[str], *, bucket: str | None = None) -> str:
    """The sentence for an existing ``stream`` (or KV ``bucket``, whose stream that is)
    with ``problems``: what is wrong, and the command that fixes it."""
    what = f"the {bucket} bucket" if bucket is not None else f"the {stream} stream"
    return (
        f"{what} exists with settings Spindle cannot use: {'; '.join(problems)}. Edit it "
        f"(nats stream edit {stream}), or remove it if it holds nothing to keep (nats "
        f"stream rm {stream}): Spindle makes it again"
    )

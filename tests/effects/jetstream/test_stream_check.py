"""``stream_problems``, ``kv_problems`` and ``subject_covers`` on configurations as nats-py
reads them: what Spindle needs of an existing stream (its subjects, file storage, limits
retention, no limits that drop messages, writes taken and acknowledged) or KV bucket (the
TTL it must have, or none; file storage; no limits), and nothing more."""

from __future__ import annotations

import pytest
from nats.js.api import (
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamSource,
    SubjectTransform,
)

from threadspindle.effects.jetstream.stream_check import (
    kv_problems,
    stream_problems,
    subject_covers,
    subjects_overlap,
    unusable,
)

PATTERN = "spindle.thread.*.log"


@pytest.mark.parametrize(
    ("stream_subject", "covers"),
    [
        ("spindle.thread.*.log", True),
        ("spindle.thread.*.*", True),
        ("spindle.thread.>", True),
        ("spindle.>", True),
        (">", True),
        ("*.thread.*.log", True),
        ("spindle.thread.*", False),  # one token short
        ("spindle.thread.*.log.x", False),  # one token more
        ("spindle.thread.t1.log", False),  # one thread only
        ("spindle.thread.*.logs", False),
        ("spindle.*.log", False),
        ("other.>", False),
        ("spindle.thread.*.log.>", False),  # ">" takes one token or more, never none
    ],
)
def test_a_stream_subject_covers_the_pattern_only_when_it_takes_every_thread(
    stream_subject: str, covers: bool
) -> None:
    assert subject_covers(stream_subject, PATTERN) is covers


def _config(**settings: object) -> StreamConfig:
    fields: dict[str, object] = {
        "name": "SPINDLE",
        "subjects": [PATTERN],
        "storage": StorageType.FILE,
        "retention": RetentionPolicy.LIMITS,
        "max_msgs": -1,
        "max_bytes": -1,
        "max_age": 0,
        "max_msgs_per_subject": -1,
        "max_msg_size": -1,
        "num_replicas": 1,
    }
    fields.update(settings)
    return StreamConfig(**fields)  # type: ignore[arg-type]


def _problems(config: StreamConfig) -> list[str]:
    return stream_problems(config, subjects=PATTERN, max_payload=1024 * 1024)


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"subjects": ["spindle.>"]},
        {"subjects": ["other.>", "spindle.thread.>"]},
        {"allow_direct": False, "deny_delete": True, "deny_purge": True},
        {"num_replicas": 1},  # fewer than asked is a warning of the caller's, not a problem
        {"max_msg_size": 1024 * 1024},  # what the servers take anyway
        {"duplicate_window": 0.0, "discard": "new"},
        # As nats-py reads a stream whose config omits the fields.
        {"max_msgs": None, "max_bytes": None, "max_age": None, "storage": None, "retention": None},
    ],
)
def test_a_stream_the_log_can_use_has_no_problem(settings: dict[str, object]) -> None:
    assert _problems(_config(**settings)) == []


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"subjects": ["other.>"]}, "its subjects (other.>) do not take spindle.thread.*.log"),
        ({"subjects": []}, "its subjects (none) do not take"),
        ({"storage": StorageType.MEMORY}, "it keeps its messages in memory"),
        ({"retention": RetentionPolicy.INTEREST}, "its retention is 'interest', not 'limits'"),
        ({"retention": RetentionPolicy.WORK_QUEUE}, "its retention is 'workqueue'"),
        ({"max_msgs": 1000}, "it keeps at most 1000 messages: older messages would be lost"),
        ({"max_msgs_per_subject": 1}, "it keeps at most 1 messages a subject"),
        ({"max_bytes": 10_000_000}, "it keeps at most 10000000 bytes"),
        ({"max_age": 86400.0}, "it keeps messages for 86400 s"),
        ({"max_msg_size": 4096}, "it refuses messages over 4096 bytes (the servers take 1048576)"),
        ({"no_ack": True}, "it does not acknowledge writes"),
        ({"sealed": True}, "it is sealed"),
        ({"mirror": StreamSource(name="ELSEWHERE")}, "it mirrors another stream"),
        (
            {"subject_transform": SubjectTransform(src=">", dest="x.>")},
            "it rewrites the subjects it stores",
        ),
    ],
)
def test_each_setting_that_would_lose_or_refuse_writes_is_named(
    settings: dict[str, object], said: str
) -> None:
    problems = _problems(_config(**settings))
    assert len(problems) == 1 and said in problems[0], problems


def test_several_limits_make_one_sentence_and_every_problem_is_named() -> None:
    problems = _problems(
        _config(subjects=["x.>"], storage=StorageType.MEMORY, max_msgs=5, max_age=60.0)
    )
    assert problems == [
        "its subjects (x.>) do not take spindle.thread.*.log",
        "it keeps its messages in memory: a restart of the servers would lose all it holds",
        "it keeps at most 5 messages and messages for 60 s: older messages would be lost",
    ]


def _bucket(**settings: object) -> StreamConfig:
    """A KV bucket's stream, as nats-py makes it (history 1, no TTL unless given)."""
    return _config(name="KV_b", subjects=["$KV.b.>"], max_msgs_per_subject=1, **settings)


def test_a_bucket_whose_keys_must_stay_may_not_expire_or_drop_them() -> None:
    assert kv_problems(_bucket(), ttl=None) == []
    assert kv_problems(_bucket(max_age=0.0, num_replicas=3), ttl=None) == []
    assert kv_problems(_bucket(max_age=3600.0), ttl=None) == ["its keys expire after 3600 s"]
    assert kv_problems(_bucket(storage=StorageType.MEMORY, max_msgs=100), ttl=None) == [
        "it keeps its keys in memory: a restart of the servers would lose them",
        "it keeps at most 100 values: older keys would be lost",
    ]


def test_a_lease_bucket_must_have_the_leases_ttl() -> None:
    assert kv_problems(_bucket(max_age=5.0), ttl=5.0) == []
    assert kv_problems(_bucket(max_age=60.0), ttl=5.0) == [
        "its TTL is 60 s where the leases' is 5 s"
    ]
    assert kv_problems(_bucket(max_age=0.0), ttl=5.0) == ["it has no TTL where the leases' is 5 s"]


def test_the_sentence_names_what_is_wrong_and_the_command_that_fixes_it() -> None:
    assert unusable("SPINDLE_IN", ["a", "b"]) == (
        "the SPINDLE_IN stream exists with settings Spindle cannot use: a; b. Edit it (nats "
        "stream edit SPINDLE_IN), or remove it if it holds nothing to keep (nats stream rm "
        "SPINDLE_IN): Spindle makes it again"
    )
    assert unusable("KV_spindle_routes", ["c"], bucket="spindle_routes").startswith(
        "the spindle_routes bucket exists with settings Spindle cannot use: c. Edit it (nats "
        "stream edit KV_spindle_routes)"
    )


@pytest.mark.parametrize(
    ("first", "second", "overlap"),
    [
        ("spindle.out.>", "spindle.out.console.*", True),
        ("spindle.out.console.*", "spindle.out.discord-0.*", False),
        ("spindle.out.*.*", "spindle.out.console.t1", True),
        ("spindle.in.a.*", "spindle.in.a.*", True),
        ("spindle.in.a.*", "spindle.in.a", False),  # different lengths
        ("spindle.in.a", "spindle.in.a.>", False),  # ">" needs a token
        (">", "x", True),
        ("a.*.c", "a.b.d", False),
    ],
)
def test_two_filters_overlap_when_some_subject_matches_both(
    first: str, second: str, overlap: bool
) -> None:
    assert subjects_overlap(first, second) is overlap
    assert subjects_overlap(second, first) is overlap


def test_a_transport_stream_may_be_a_work_queue_and_a_log_may_not() -> None:
    queue = _config(retention=RetentionPolicy.WORK_QUEUE)
    assert _problems(queue) == [
        "its retention is 'workqueue', not 'limits': messages would be deleted before every "
        "reader has them"
    ]
    both = (RetentionPolicy.WORK_QUEUE, RetentionPolicy.LIMITS)
    assert stream_problems(queue, subjects=PATTERN, max_payload=1 << 20, retentions=both) == []
    assert stream_problems(
        _config(retention="interest"), subjects=PATTERN, max_payload=1 << 20, retentions=both
    ) == [
        "its retention is 'interest', not 'workqueue' or 'limits': messages would be deleted "
        "before every reader has them"
    ]

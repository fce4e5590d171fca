"""``open_jetstream``'s set-up asks again when JetStream answers "no suitable peers for
placement" (err_code 10005: a node of a cluster just started is not current yet) or does not
answer at all ("no responders": the API's interest is still crossing the routes); either
way the cluster is ready a moment later. A full ``make test`` once failed so, on the
stream's creation, which took the refusal for a stream that already exists and then failed
on ``stream_info``.

These tests answer the calls with fakes of nats-py's objects, to count and order them
(a refusal that ends after N tries, a stream that exists with another configuration):
what is checked is ``_ensure``'s and ``bucket``'s handling of the answers. Real clusters
with nodes missing refuse too, every time (two nodes of three: 10005; one: "no
responders"): ``test_jetstream_placement_live.py`` runs ``open_jetstream`` against them."""

from __future__ import annotations

from typing import Any

import nats.errors
import pytest
import trio
from nats.js.api import StorageType, StreamConfig, StreamInfo, StreamState
from nats.js.errors import (
    BadRequestError,
    NoStreamResponseError,
    NotFoundError,
    ServiceUnavailableError,
)

from threadspindle.effects.asyncio_loop import open_asyncio_loop
from threadspindle.effects.jetstream import connection
from threadspindle.effects.jetstream.connection import _ensure


def _no_peers() -> BadRequestError:
    return BadRequestError(
        code=400, err_code=10005, description="insufficient resources: no suitable peers"
    )


class FakeStatus:
    ttl = 5.0


class FakeKeyValue:
    def __init__(self, name: str, not_found: int = 0) -> None:
        self.name = name
        self.not_found = not_found  # status says "stream not found" so many times first
        self.status_calls = 0

    async def status(self) -> FakeStatus:
        self.status_calls += 1
        if self.not_found > 0:
            self.not_found -= 1
            raise NotFoundError(code=404, err_code=10059, description="stream not found")
        return FakeStatus()


class FakeJetStream:
    """Refuses each call's first ``refusals[call]`` times (with ``refusal()``), then does
    it."""

    def __init__(
        self,
        refusals: dict[str, int],
        exists: bool = False,
        refusal: type[Exception] | None = None,
        status_not_found: int = 0,
    ) -> None:
        self.status_not_found = status_not_found  # a new bucket's status, at first
        self.refusals = dict(refusals)
        self.refusal = refusal
        self.exists = exists  # add_stream answers "already in use" (another configuration)
        self.calls: list[str] = []
        self.streams: list[dict[str, Any]] = []

    def _refuse(self, call: str) -> None:
        self.calls.append(call)
        if self.refusals.get(call, 0) > 0:
            self.refusals[call] -= 1
            raise self.refusal() if self.refusal is not None else _no_peers()

    async def add_stream(self, **config: Any) -> None:
        self._refuse("add_stream")
        if self.exists:
            raise BadRequestError(
                code=400, err_code=10058, description="stream name already in use"
            )
        self.streams.append(config)

    async def stream_info(self, name: str) -> StreamInfo:
        self.calls.append("stream_info")
        if not self.exists:
            raise NotFoundError(code=404, err_code=10059, description="stream not found")
        # As a runner asking for one replica made it (another configuration than 3).
        config = StreamConfig(
            name=name, subjects=["spindle.thread.*.log"], storage=StorageType.FILE, num_replicas=1
        )
        return StreamInfo(config=config, state=StreamState(0, 0, 0, 0, 0))

    async def create_key_value(self, *, bucket: str, **settings: Any) -> FakeKeyValue:
        self._refuse(f"create_key_value:{bucket}")
        return FakeKeyValue(bucket, self.status_not_found)

    async def key_value(self, bucket: str) -> FakeKeyValue:
        self.calls.append(f"key_value:{bucket}")
        return FakeKeyValue(bucket)


class FakeClient:
    max_payload = 1024 * 1024

    def __init__(self, js: FakeJetStream) -> None:
        self.js = js

    def jetstream(self, timeout: float) -> FakeJetStream:
        return self.js


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection, "_PLACEMENT_WAIT_S", 0.01)


async def test_the_stream_is_asked_for_again_until_the_cluster_can_place_it() -> None:
    js = FakeJetStream({"add_stream": 3})
    async with open_asyncio_loop():
        with trio.fail_after(10):
            live = await _ensure(FakeClient(js), 3, 5.0)  # type: ignore[arg-type]
    assert js.calls.count("add_stream") == 4
    assert "stream_info" not in js.calls  # the refusal was not taken for an existing stream
    assert len(js.streams) == 1 and js.streams[0]["num_replicas"] == 3
    assert live.replicas == 3


async def test_a_bucket_is_asked_for_again_until_the_cluster_can_place_it() -> None:
    js = FakeJetStream({f"create_key_value:{connection.LEASES_BUCKET}": 2})
    async with open_asyncio_loop():
        with trio.fail_after(10):
            live = await _ensure(FakeClient(js), 3, 5.0)  # type: ignore[arg-type]
    assert js.calls.count(f"create_key_value:{connection.LEASES_BUCKET}") == 3
    assert isinstance(live.leases, FakeKeyValue)
    assert live.leases.name == connection.LEASES_BUCKET


async def test_a_stream_or_bucket_slower_than_the_api_timeout_is_asked_for_again() -> None:
    # A cluster just started on a loaded machine took over the API's 5 s to make the
    # snapshots bucket once in a full test run: the stream was asked again, the bucket not.
    js = FakeJetStream(
        {
            "add_stream": 2,
            f"create_key_value:{connection.LEASES_BUCKET}": 1,
            f"create_key_value:{connection.SNAPSHOTS_BUCKET}": 3,
        },
        refusal=nats.errors.TimeoutError,
    )
    async with open_asyncio_loop():
        with trio.fail_after(10):
            live = await _ensure(FakeClient(js), 3, 5.0)  # type: ignore[arg-type]
    assert js.calls.count("add_stream") == 3
    assert js.calls.count(f"create_key_value:{connection.SNAPSHOTS_BUCKET}") == 4
    assert live.snapshots.name == connection.SNAPSHOTS_BUCKET  # type: ignore[attr-defined]
    # Never answered: the timeout, after so many attempts.
    js = FakeJetStream(
        {f"create_key_value:{connection.LEASES_BUCKET}": 100}, refusal=nats.errors.TimeoutError
    )
    async with open_asyncio_loop():
        with trio.fail_after(10), pytest.raises(nats.errors.TimeoutError):
            await _ensure(FakeClient(js), 3, 5.0)  # type: ignore[arg-type]
    assert js.calls.count(f"create_key_value:{connection.LEASES_BUCKET}") == (
        connection._ENSURE_ATTEMPTS
    )


async def test_an_existing_stream_is_used_as_it_is() -> None:
    js = FakeJetStream({}, exists=True)
    async with open_asyncio_loop():
        with trio.fail_after(10):
            await _ensure(FakeClient(js), 1, 5.0)  # type: ignore[arg-type]
    assert js.calls[:2] == ["add_stream", "stream_info"]


async def test_a_cluster_that_never_places_it_ends_in_an_error() -> None:
    """After ``_PLACEMENT_TRIES`` refusals it stops asking: the refusal itself is the
    error, not a wait for ever, nor a lookup of a stream that does not exist."""
    js = FakeJetStream({"add_stream": connection._PLACEMENT_TRIES})
    async with open_asyncio_loop():
        with trio.fail_after(10), pytest.raises(BadRequestError) as raised:
            await _ensure(FakeClient(js), 3, 5.0)  # type: ignore[arg-type]
    assert raised.value.err_code == 10005
    assert js.calls.count("add_stream") == connection._PLACEMENT_TRIES
    assert "stream_info" not in js.calls


@pytest.mark.parametrize("refusal", [ServiceUnavailableError, NoStreamResponseError])
async def test_no_responders_at_a_clusters_start_is_asked_again(
    refusal: type[Exception],
) -> None:
    """nats-py says "no responders" as ServiceUnavailableError (API requests) or
    NoStreamResponseError (publishes): the stream and both buckets are asked for again."""
    js = FakeJetStream(
        {
            "add_stream": 2,
            f"create_key_value:{connection.LEASES_BUCKET}": 1,
            f"create_key_value:{connection.SNAPSHOTS_BUCKET}": 3,
        },
        refusal=refusal,
    )
    async with open_asyncio_loop():
        with trio.fail_after(10):
            live = await _ensure(FakeClient(js), 3, 5.0)  # type: ignore[arg-type]
    assert js.calls.count("add_stream") == 3
    assert js.calls.count(f"create_key_value:{connection.LEASES_BUCKET}") == 2
    assert js.calls.count(f"create_key_value:{connection.SNAPSHOTS_BUCKET}") == 4
    assert "stream_info" not in js.calls and len(js.streams) == 1
    assert live.snapshots.name == connection.SNAPSHOTS_BUCKET  # type: ignore[attr-defined]


async def test_a_bucket_never_placed_ends_in_the_refusal() -> None:
    """A bucket refused every time: the refusal is the error (before, the last one was
    taken for a bucket that exists with other settings, and looked up)."""
    js = FakeJetStream(
        {f"create_key_value:{connection.LEASES_BUCKET}": connection._PLACEMENT_TRIES},
        refusal=ServiceUnavailableError,
    )
    async with open_asyncio_loop():
        with trio.fail_after(10), pytest.raises(ServiceUnavailableError):
            await _ensure(FakeClient(js), 3, 5.0)  # type: ignore[arg-type]
    assert f"key_value:{connection.LEASES_BUCKET}" not in js.calls


async def test_a_bucket_just_made_and_not_found_yet_is_asked_again() -> None:
    """A replicated stream just made is not found for a moment while its replicas elect a
    leader: ``spindle cluster dev`` on a loaded machine saw a runner stop at start on a
    bucket's status ("stream not found", 10059). It is asked again, and found."""
    js = FakeJetStream({}, status_not_found=3)
    async with open_asyncio_loop():
        with trio.fail_after(10):
            live = await _ensure(FakeClient(js), 3, 5.0)  # type: ignore[arg-type]
    assert isinstance(live.leases, FakeKeyValue)
    assert live.leases.status_calls == 4
    assert live.lease_ttl_s == FakeStatus.ttl
    # Never found: the error, after so many tries, not a wait for ever.
    js = FakeJetStream({}, status_not_found=connection._PLACEMENT_TRIES)
    async with open_asyncio_loop():
        with trio.fail_after(10), pytest.raises(NotFoundError):
            await _ensure(FakeClient(js), 3, 5.0)  # type: ignore[arg-type]


async def test_every_stream_is_asked_for_again_until_the_cluster_can_place_it() -> None:
    """``add_stream``, which makes the log's stream and the transport's two: a cluster not
    ready yet is asked again, not taken for a stream that exists with other settings (the
    transport's streams once were, and looked up a stream that did not exist: a full test
    run); an existing one's info is returned for its caller to judge."""
    js = FakeJetStream({"add_stream": 3})
    async with open_asyncio_loop():
        with trio.fail_after(10):
            made = await connection.add_stream(js, name="SPINDLE_IN")  # type: ignore[arg-type]
    assert made is None
    assert js.calls.count("add_stream") == 4 and "stream_info" not in js.calls
    js = FakeJetStream({}, exists=True)
    async with open_asyncio_loop():
        with trio.fail_after(10):
            existing = await connection.add_stream(js, name="SPINDLE_IN")  # type: ignore[arg-type]
    assert existing is not None and js.calls == ["add_stream", "stream_info"]

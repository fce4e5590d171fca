"""``spindle runner`` against a cluster it cannot use: a sentence, an exit.

Two nodes of a 3-node cluster are up and the runner asks for 3 replicas: JetStream refuses
to place the stream, every time. The runner asks again for 5 s, then says what is wrong
and exits with the usage code, instead of a traceback of exception groups. The same for a
``SPINDLE`` stream made by hand with settings the log cannot use."""

from __future__ import annotations

import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest
import trio
from cli_harness import SPINDLE, environment, make_place

from threadspindle.effects.jetstream.servers import NatsCluster
from threadspindle.testkit.nats_cluster import make_bucket, make_stream, nats_cluster


@pytest.mark.timeout(120)
def test_a_runner_asking_for_more_replicas_than_nodes_up_says_so(tmp_path: Path) -> None:
    place = make_place(tmp_path)
    cluster = NatsCluster(tmp_path / "nats", size=3)
    try:
        for node in cluster.nodes[:2]:
            node.start()
        for node in cluster.nodes[:2]:
            node.wait_healthy(30)
        urls = ",".join(cluster.plain_urls[:2])
        done = subprocess.run(
            [*SPINDLE, "runner", "--nats", urls, "--replicas", "3", "--root", str(place["work"])],
            capture_output=True,
            text=True,
            cwd=place["work"],
            env=environment(place, {"SPINDLE_CLUSTER__PASSWORD": str(cluster.password)}),
            timeout=90,
        )
    finally:
        cluster.stop()
    assert done.returncode == 2, done.stderr
    assert "Cannot start the runner: JetStream cannot place the SPINDLE stream" in done.stderr
    assert "no suitable peers for placement" in done.stderr
    assert "are 3 nodes of the cluster up? (2 servers given)" in done.stderr
    assert "Traceback" not in done.stderr and "ExceptionGroup" not in done.stderr


async def _stream_of_other_subjects(url: str) -> None:
    await make_stream(url, "SPINDLE", subjects=["orders.>"])


async def _root_leases_of_another_ttl(url: str) -> None:
    await make_bucket(url, "spindle_root_leases", ttl=30.0)


def _runner(tmp_path: Path, make: Callable[[str], Awaitable[None]]) -> CompletedProcess[str]:
    """``spindle runner`` on one node where ``make`` made a stream or bucket first."""
    place = make_place(tmp_path)
    with nats_cluster(tmp_path / "nats") as cluster:
        trio.run(make, cluster.urls[0])
        return subprocess.run(
            [*SPINDLE, "runner", "--nats", cluster.plain_urls[0], "--root", str(place["work"])],
            capture_output=True,
            text=True,
            cwd=place["work"],
            env=environment(place, {"SPINDLE_CLUSTER__PASSWORD": str(cluster.password)}),
            timeout=90,
        )


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("make", "said", "fix"),
    [
        (
            _stream_of_other_subjects,
            "the SPINDLE stream exists with settings Spindle cannot use: its subjects "
            "(orders.>) do not take spindle.thread.*.log.",
            "nats stream edit SPINDLE",
        ),
        # The transport's buckets are opened once the runner runs, inside its nurseries:
        # the sentence still comes alone, not in exception groups.
        (
            _root_leases_of_another_ttl,
            "the spindle_root_leases bucket exists with settings Spindle cannot use: its TTL "
            "is 30 s where the leases' is ",
            "nats stream edit KV_spindle_root_leases",
        ),
    ],
    ids=["stream", "bucket"],
)
def test_a_runner_finding_a_stream_or_bucket_it_cannot_use_says_so(
    tmp_path: Path, make: Callable[[str], Awaitable[None]], said: str, fix: str
) -> None:
    done = _runner(tmp_path, make)
    assert done.returncode == 2, done.stderr
    assert f"Cannot start the runner: {said}" in done.stderr
    assert fix in done.stderr
    assert "Traceback" not in done.stderr and "ExceptionGroup" not in done.stderr

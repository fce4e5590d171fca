"""``spindle runner`` against a cluster that cannot hold its replicas: a sentence, an exit.

Two nodes of a 3-node cluster are up and the runner asks for 3 replicas: JetStream refuses
to place the stream, every time. The runner asks again for 5 s, then says what is wrong
and exits with the usage code, instead of a traceback of exception groups."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cli_harness import SPINDLE, environment, make_place

from threadspindle.effects.jetstream.servers import NatsCluster


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

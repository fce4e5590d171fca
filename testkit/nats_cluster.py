"""NATS servers for tests and local trials: one node or a 3-node JetStream cluster on
127.0.0.1, started in a temporary directory and stopped on the way out.

The launcher itself is ``effects.jetstream.servers`` (``spindle cluster dev`` uses it too);
this module gives tests the context managers and the fault helpers by name: ``kill``
(SIGKILL), ``pause`` (SIGSTOP), ``resume`` (SIGCONT) and ``restart`` of one node, and
``leader_of`` to find the node leading a stream (to kill it, or to spare it).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from threadspindle.effects.jetstream.servers import NatsCluster, NatsNode, NatsServerError

__all__ = ["NatsCluster", "NatsNode", "NatsServerError", "leader_of", "nats_cluster", "restart"]


_RANDOM = "random"


@contextmanager
def nats_cluster(
    directory: Path, size: int = 1, password: str | None = _RANDOM
) -> Iterator[NatsCluster]:
    """``size`` nodes (1 or 3), healthy before the body runs, all stopped after it. They let
    in only clients with a random password (in ``cluster.urls``), unless ``password`` names
    another, or is None: anyone may connect."""
    cluster = (
        NatsCluster(Path(directory), size=size)
        if password == _RANDOM
        else NatsCluster(Path(directory), size=size, password=password)
    )
    with cluster:
        yield cluster


def restart(node: NatsNode, timeout: float = 30.0) -> None:
    """Start a stopped or killed node again on the same ports and data, and wait for it."""
    node.start()
    node.wait_healthy(timeout)


def leader_of(cluster: NatsCluster, stream: str) -> NatsNode | None:
    """The node that leads ``stream`` now, per any live node's ``/jsz`` (None: no leader)."""
    for node in cluster.nodes:
        if not node.running:
            continue
        url = f"{node.monitor_url}/jsz?streams=true&raft=true"
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                info = json.loads(resp.read())
        except OSError:
            continue
        for account in info.get("account_details", []):
            for detail in account.get("stream_detail", []):
                if detail.get("name") == stream:
                    leader = (detail.get("cluster") or {}).get("leader")
                    for candidate in cluster.nodes:
                        if candidate.name == leader:
                            return candidate
    return None

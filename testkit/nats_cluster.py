"""NATS servers for tests and local trials: one node or a 3-node JetStream cluster on
127.0.0.1, started in a temporary directory and stopped on the way out.

The launcher itself is ``effects.jetstream.servers`` (``spindle cluster dev`` uses it too);
this module gives tests the context managers and the fault helpers by name: ``kill``
(SIGKILL), ``pause`` (SIGSTOP), ``resume`` (SIGCONT) and ``restart`` of one node, and
``leader_of`` to find the node leading a stream (to kill it, or to spare it); and
``make_stream`` / ``make_bucket``, a stream or KV bucket made as an operator would make it
by hand (before Spindle starts, to see what Spindle makes of it).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nats
import trio_asyncio

from threadspindle.effects.jetstream.servers import NatsCluster, NatsNode, NatsServerError

__all__ = [
    "NatsCluster",
    "NatsNode",
    "NatsServerError",
    "leader_of",
    "make_bucket",
    "make_stream",
    "nats_cluster",
    "restart",
]


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


async def make_stream(url: str, name: str, **settings: Any) -> None:
    """Make the stream ``name`` with nats-py's ``add_stream`` settings (from trio)."""
    await _with_jetstream(url, lambda js: js.add_stream(name=name, **settings))


async def make_bucket(url: str, name: str, **settings: Any) -> None:
    """Make the KV bucket ``name`` with nats-py's ``create_key_value`` settings."""
    await _with_jetstream(url, lambda js: js.create_key_value(bucket=name, **settings))


async def _with_jetstream(url: str, call: Callable[[Any], Awaitable[object]]) -> None:
    async def run() -> None:
        nc = await nats.connect(url)
        try:
            await call(nc.jetstream())
        finally:
            await nc.close()

    async with trio_asyncio.open_loop():
        await trio_asyncio.aio_as_trio(run)()

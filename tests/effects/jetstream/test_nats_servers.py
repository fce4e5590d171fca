"""``effects.jetstream.servers``: ports a fresh cluster picks and what happens when one is
taken before the server binds it (a full test run saw "address already in use")."""

from __future__ import annotations

import socket
from pathlib import Path

from threadspindle.effects.jetstream.servers import NatsCluster, free_port


def test_free_ports_are_picked_below_the_ephemeral_range() -> None:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(10_000 <= port < low for port in ports)


def test_a_fresh_cluster_whose_port_was_taken_starts_on_new_ports(tmp_path: Path) -> None:
    cluster = NatsCluster(tmp_path, size=3)
    taken = cluster.nodes[1].cluster_port
    assert taken is not None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        with cluster:
            assert cluster.nodes[1].cluster_port != taken
            assert all(node.healthy() for node in cluster.nodes)
            assert taken not in cluster.nodes[0].routes

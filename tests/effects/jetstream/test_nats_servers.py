"""``effects.jetstream.servers``: ports a fresh cluster picks and what happens when one is
taken before the server binds it (a full test run saw "address already in use"); a server's
environment holds none of Spindle's ``SPINDLE_*`` secrets."""

from __future__ import annotations

import asyncio
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

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


def test_monitoring_answers_only_under_the_nodes_random_path(tmp_path: Path) -> None:
    """nats-server's monitoring has no password and names every subject and client: an
    agent on the machine finds the port, not the path."""
    with NatsCluster(tmp_path) as cluster:
        node = cluster.nodes[0]
        assert node.healthy()
        for path in ("healthz", "varz", "connz", "jsz", "subsz"):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/{path}", timeout=2)
            except urllib.error.HTTPError as exc:
                assert exc.code == 404, path
            else:
                raise AssertionError(f"/{path} answered without the path")


def test_a_directory_used_before_starts_with_this_runs_ports_and_password(
    tmp_path: Path,
) -> None:
    """``spindle cluster dev --dir D`` run again: new ports and a new password, same data."""

    async def put_and_get(urls: list[str], value: bytes | None) -> bytes:
        import nats
        import nats.js.errors

        client = await nats.connect(urls)
        try:
            # Healthy nodes (the meta leader elected) may still answer "no responders" for
            # a moment, while the JetStream API's interest crosses the routes (seen once in
            # a full run): asked again for up to 10 s. nats-py says it as
            # ServiceUnavailableError (API requests) or NoStreamResponseError (a publish).
            for attempt in range(50):
                try:
                    kv = await client.jetstream().create_key_value(bucket="kept", history=1)
                    if value is not None:
                        await kv.put("k", value)
                    return bytes((await kv.get("k")).value or b"")
                except (
                    nats.js.errors.NoStreamResponseError,
                    nats.js.errors.ServiceUnavailableError,
                ):
                    if attempt == 49:
                        raise
                    await asyncio.sleep(0.2)
            raise AssertionError("unreachable")
        finally:
            await client.close()

    with NatsCluster(tmp_path, size=3) as first:
        assert asyncio.run(put_and_get(first.urls, b"v1")) == b"v1"
        first_ports = [node.client_port for node in first.nodes]
    second = NatsCluster(tmp_path, size=3)
    assert [node.client_port for node in second.nodes] != first_ports
    with second:
        assert second.password != first.password
        assert asyncio.run(put_and_get(second.urls, None)) == b"v1"


def test_a_server_starts_without_spindles_settings_in_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-server stays dumpable: a same-user agent reads its ``/proc/<pid>/environ``, so
    Spindle's ``SPINDLE_*`` secrets (bot tokens, the cluster password) are not in it."""
    monkeypatch.setenv("SPINDLE_DISCORD_TOKEN", "the-secret-bot-token-value")
    monkeypatch.setenv("SPINDLE_CLUSTER__PASSWORD", "cluster-secret-pw")
    monkeypatch.setenv("SPINDLE_TEST_KEPT_OUT", "1")
    monkeypatch.setenv("ORDINARY_VARIABLE", "kept")
    with NatsCluster(tmp_path) as cluster:
        process = cluster.nodes[0].process
        assert process is not None
        environ = Path(f"/proc/{process.pid}/environ").read_bytes().split(b"\0")
    assert b"ORDINARY_VARIABLE=kept" in environ
    assert not [v for v in environ if v.startswith(b"SPINDLE_")], environ

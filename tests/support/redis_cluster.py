"""A Redis Cluster of primaries with one replica each, on 127.0.0.1, to fail over for real.

Each node is a :class:`~tests.support.redis_server.RedisServer` (no RDB, no AOF). A failover
SIGKILLs the primary serving a slot, waits until the cluster promotes its replica, then starts
the old node again on its port: it reads its ``nodes-<port>.conf``, finds its slots taken over,
and rejoins as a replica of the new primary (empty, so it syncs everything from it).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from tests.support.redis_server import RedisServer, wait_for_link

__all__ = ["Failover", "RedisClusterNodes", "own_redis_cluster_with_replicas"]

NODE_TIMEOUT_MS = 1000
"""How long a node may not answer before the cluster counts it failed (the default is 15 s)."""
_NODE_ARGS = (
    "--cluster-enabled", "yes", "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
    # A replica whose link was down a while (frozen) may still be promoted: the test decides.
    "--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0",
)  # fmt: skip


@dataclass(frozen=True)
class Failover:
    """One failover: when the primary was killed and when the cluster served its slot again."""

    killed_at: float
    promoted_at: float
    rejoined_at: float
    """When the old primary was a synced replica of the new one (which can confirm writes)."""
    killed_port: int
    promoted_port: int


class RedisClusterNodes:
    """The nodes of one cluster; ``url`` names a node to start from (the client finds the rest)."""

    def __init__(self, servers: list[RedisServer]) -> None:
        self.servers = servers

    @property
    def url(self) -> str:
        """A URL to the cluster (every node is a seed: any may be down)."""
        return self.servers[0].url

    def by_port(self, port: int) -> RedisServer:
        """The node on ``port``."""
        return next(server for server in self.servers if server.port == port)

    def primary_of(self, key: str) -> RedisServer:
        """The node serving ``key``'s slot now, as a live node's ``CLUSTER SLOTS`` says."""
        slot = key_slot(key.encode())
        for server in self._live():
            try:
                with redis.Redis(port=server.port, socket_timeout=2) as client:
                    for low, high, primary, *_ in client.execute_command("CLUSTER SLOTS"):
                        if low <= slot <= high:
                            return self.by_port(int(primary[1]))
            except redis.RedisError:
                continue
        raise AssertionError(f"no live node knows who serves slot {slot}")

    def fail_over(self, key: str, *, lag: float = 0.0, timeout: float = 30.0) -> Failover:
        """SIGKILL the primary of ``key``'s slot, wait for its replica to take over, restart it.

        ``lag``: first freeze the replica (SIGSTOP) and cut its link for that many seconds, so
        the writes of that time reach only the primary, which then dies with them; the replica
        is thawed and promoted without them: the hazard ``wait_replicas`` guards against.
        """
        old = self.primary_of(key)
        replicas = self._replicas_of(old)
        if lag:
            # Frozen, a replica could still read what its primary sent before it died (its
            # socket's buffer): its link is cut too, so it cannot connect again while frozen.
            for replica in replicas:
                replica.freeze()
            with redis.Redis(port=old.port) as client:
                client.execute_command("CLIENT", "KILL", "TYPE", "replica")  # any redis-py
            time.sleep(lag)
        old.kill()
        killed_at = time.time()
        for replica in replicas:
            replica.thaw()
        deadline = time.monotonic() + timeout
        while True:
            new = self._served(key, old)
            if new is not None:
                break
            assert time.monotonic() < deadline, f"no replica took over slot of {key!r}"
            time.sleep(0.05)
        promoted_at = time.time()
        self.rejoin(old, new, deadline)
        return Failover(killed_at, promoted_at, time.time(), old.port, new.port)

    def rejoin(self, old: RedisServer, new: RedisServer, deadline: float) -> None:
        """Start ``old`` again; wait until it is a synced replica of ``new``, the cluster ok."""
        old.start()
        self._settle(old, new, deadline)

    def _served(self, key: str, old: RedisServer) -> RedisServer | None:
        """The node now serving ``key``'s slot, if it is another than ``old`` and a primary."""
        try:
            new = self.primary_of(key)
            if new is old:
                return None
            with redis.Redis(port=new.port, socket_timeout=2, decode_responses=True) as client:
                return new if client.info("replication")["role"] == "master" else None
        except (redis.RedisError, AssertionError):
            return None

    def _settle(self, old: RedisServer, new: RedisServer, deadline: float) -> None:
        """Wait until ``old`` is a synced replica of ``new`` and the cluster is ok everywhere."""
        wait_for_link(old.port, max(1.0, deadline - time.monotonic()))
        with redis.Redis(port=new.port, decode_responses=True) as client:
            while int(client.info("replication")["connected_slaves"]) < 1:
                assert time.monotonic() < deadline, "the old primary never rejoined as a replica"
                time.sleep(0.05)
        self.wait_ok(deadline)

    def wait_ok(self, deadline: float) -> None:
        """Wait until every live node says ``cluster_state:ok``."""
        for server in self._live():
            with redis.Redis(port=server.port, decode_responses=True) as client:
                while client.cluster("info").get("cluster_state") != "ok":
                    assert time.monotonic() < deadline, "the cluster never became ready"
                    time.sleep(0.05)

    def _replicas_of(self, primary: RedisServer) -> list[RedisServer]:
        with redis.Redis(port=primary.port, decode_responses=True) as client:
            info = client.info("replication")
        ports = [int(info[f"slave{i}"]["port"]) for i in range(int(info["connected_slaves"]))]
        return [self.by_port(port) for port in ports]

    def _live(self) -> list[RedisServer]:
        return [s for s in self.servers if s.process is not None and s.process.poll() is None]


@contextmanager
def own_redis_cluster_with_replicas(
    workdir: Path, primaries: int = 3, replicas: int = 1
) -> Iterator[RedisClusterNodes]:
    """A started cluster of ``primaries`` primaries with ``replicas`` replicas each; all its
    nodes are thawed and killed afterwards, even on failure."""
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("redis-cli is not installed")
    workdir.mkdir(parents=True, exist_ok=True)
    servers = [RedisServer(workdir, *_NODE_ARGS) for _ in range(primaries * (1 + replicas))]
    try:
        for server in servers:
            server.start()
        addresses = [f"127.0.0.1:{server.port}" for server in servers]
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", str(replicas),
             "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        nodes = RedisClusterNodes(servers)
        deadline = time.monotonic() + 60
        nodes.wait_ok(deadline)
        for server in servers:
            with redis.Redis(port=server.port, decode_responses=True) as client:
                role = client.info("replication")["role"]
            if role == "slave":
                wait_for_link(server.port, max(1.0, deadline - time.monotonic()))
        yield nodes
    finally:
        for server in servers:
            server.thaw()
            server.kill()

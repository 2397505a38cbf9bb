"""100,000 jobs on PostgreSQL and Redis: start-up, a 10 %-due tick by three instances, idle cost.

Every instance is a real process holding a :class:`relay.engine.Decider` with all the jobs (a mix:
10 % ``every=60``, 30 % ``every=`` 15 min to 1 h, 60 % cron in four zones), on a clock the
benchmark sets: a first tick at ``hh:10:30`` (start-up: it reads every job's history), then the
measured tick at ``hh:11:30``, when exactly the ``every=60`` jobs (10 %) are due, raced by three
processes at the same moment (every run must be won once). Then each instance finishes the runs
it won and, with nothing due, times idle ticks and sweeps (``reclaimable()``, no live run): CPU
time of this process, and the sweep's wall time too (its cost is mostly the store's). The
instances take turns for these, a second apart, so that a sweep's wall time is the store's work
and not the other two instances' on the same two cores.

Baselines come from the same run: the same race of instances with 1 % of the jobs on a store of
its own (the slowest of them, as for the measured race), so ``ratio`` says how a cost grows with
the number of jobs (target: idle tick and sweep O(due work), so about 1x with 100 times the
jobs). Memory: resident size per job above the process's size once the interpreter, Relay and
the driver are loaded (target <= 1 KiB). Idle CPU: one idle tick a second plus one sweep every
10 s (the defaults: tick 1 s, lease 30 s).

Celery beat (``--host beat``): the same race, each instance a :class:`relay_celery.RelayScheduler`
built from a Celery app of 100,000 ``beat_schedule`` entries (the same mix; Celery's crontab reads
the app's one zone, UTC), whose raced tick also publishes every run it won (broker ``memory://``).
Its memory is compared with stock Celery's own ``beat.Scheduler`` holding the same entries.

    python bench/bench_scale.py [--jobs 100000] [--only postgres redis] [--host standalone beat]
    python bench/bench_scale.py --memory [--trace] [--only sqlite postgres redis]

``--memory`` measures only the memory, quickly: one instance's start-up (the jobs built, the
first tick) in a fresh process per store, no race; ``--trace`` adds what tracemalloc sees.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from bench.stores import store  # noqa: E402
from bench.table import Row, at_most, ratio_at_most  # noqa: E402

ZONES = ["UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo"]
# None of these has a slot between hh:10:30 and hh:11:30 in any of the zones above.
CRONS = ["*/30 * * * *", "0 3 * * *", "15 */2 * * *", "45 9 * * 1-5"]
EVERY = [900, 1800, 3600]
INSTANCES = 3
TURN = 1.0
"""Seconds between two instances' turns at timing idle ticks and sweeps."""


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


def start(
    backend: Any,
    count: int,
    t0: float,
    trace: bool = False,
    host: str = "standalone",
    url: str = "",
) -> dict[str, Any]:
    """Build ``count`` jobs on a decider and tick once at ``t0``: what an instance's start-up costs.

    ``memory``: resident bytes above the process once the backend is connected (what the first
    tick left behind included); ``traced``, with ``trace``: the bytes Python objects still hold
    (tracemalloc), and ``top``, the lines that allocated the most of them.
    """
    import gc
    import tracemalloc

    from relay.engine import Decider
    from relay.jobs import make_job

    if host == "beat":
        import relay_celery  # noqa: F401  (imported before the baseline, like Relay itself)

    gc.collect()
    base = rss()
    if trace:
        tracemalloc.start()
    moment = [t0]
    began = time.perf_counter()
    decided: dict[str, float] = {}  # beat: when its raced step had decided every run
    if host == "beat":
        scheduler = beat_scheduler(url, count)
        decider = scheduler.decider
        decider.clock = lambda: moment[0]

        def publish(won: Any) -> bool:
            decided.setdefault("at", time.time())  # every run is decided before one is sent
            return bool(scheduler._publish(won))

        def step() -> list[Any]:
            """One step of beat's loop, as its ``tick()`` makes: it publishes each run won."""
            decided.clear()
            return list(scheduler.loop.step(publish).won)

    else:
        decider = Decider(backend, owner=secrets.token_hex(4), lease=300, clock=lambda: moment[0])
        for spec in job_specs(count):
            decider.add(make_job(backend, **spec))
        step = decider.tick
    built = time.perf_counter() - began
    began = time.perf_counter()
    first = step()
    first_tick = time.perf_counter() - began
    if host == "beat":
        scheduler.loop.next_sweep = float("inf")  # the raced step times the tick, not a sweep
    gc.collect()
    report = {"decider": decider, "step": step, "decided": decided, "moment": moment,
              "first": first, "built": built, "first_tick": first_tick,
              "memory": rss() - base}  # fmt: skip
    if trace:
        snapshot = tracemalloc.take_snapshot()
        tracemalloc.stop()
        stats = snapshot.statistics("lineno")
        report["traced"] = sum(stat.size for stat in stats)
        report["top"] = [(str(stat.traceback[0]), stat.size, stat.count) for stat in stats[:15]]
    return report


def beat_app(count: int, **conf: Any) -> Any:
    """A Celery app (broker ``memory://``) with the :func:`job_specs` as beat entries."""
    from celery import Celery
    from celery.schedules import crontab

    app = Celery(f"bench_scale_{secrets.token_hex(2)}", broker="memory://")

    @app.task(name="bench.noop", shared=False)
    def noop() -> None:
        pass

    entries = {}
    for spec in job_specs(count):
        if "every" in spec:
            schedule: Any = float(spec["every"])
        else:
            minute, hour, _, _, day_of_week = spec["cron"].split()
            schedule = crontab(minute=minute, hour=hour, day_of_week=day_of_week)
        entries[spec["name"]] = {"task": "bench.noop", "schedule": schedule}
    app.conf.update(beat_schedule=entries, timezone="UTC", **conf)
    return app


def beat_scheduler(url: str, count: int) -> Any:
    """Relay's beat scheduler for ``count`` entries on the store at ``url``."""
    from relay_celery import RelayScheduler, install

    app = beat_app(count, relay_backend=url, relay_queue_lease=300)
    install(app)
    return RelayScheduler(app)


def stock_beat_memory(count: int) -> None:
    """Stock Celery's in-memory beat scheduler with the same entries: its bytes per entry."""
    import gc

    from celery.beat import Scheduler

    gc.collect()
    base = rss()
    began = time.perf_counter()
    scheduler = Scheduler(beat_app(count))
    scheduler.tick()
    took = time.perf_counter() - began
    gc.collect()
    print(json.dumps({"memory": rss() - base, "start-up": took}))


def instance(
    url: str, count: int, t0: float, start_at: float, host: str = "standalone", turn: int = 0
) -> None:
    """One instance: build the jobs, a first tick, the raced tick, then idle ticks and sweeps
    (in its ``turn``: instance ``turn`` times them ``turn`` seconds after the first)."""
    from relay.backends import open_backend
    from relay.contract import LeaseBackend

    backend = open_backend(url)
    assert isinstance(backend, LeaseBackend)
    backend.now()  # connected before anything is measured
    started = start(backend, count, t0, host=host, url=url)
    decider, moment, first = started["decider"], started["moment"], started["first"]
    moment[0] = t0 + 60
    while time.time() < start_at:
        time.sleep(0.0005)
    began_at = time.time()
    won = started["step"]()
    ended_at = time.time()
    # Beat: the runs were all decided when the first was published; then the winners publish.
    decided_at = started["decided"].get("at", ended_at)
    for item in [*first, *won]:  # the runs end: the sweep then finds no live run
        backend.finish(item.run.id, item.run.token, succeeded=True)
    decider.sweep()  # the first sweep's one-off work (register the jobs, prune) is not measured
    # Nor the other instances' first sweeps; then one instance at a time (about 20 ms each).
    while time.time() < start_at + 5 + count / 5000 + turn * TURN:
        time.sleep(0.01)
    idle, idle_cpu = timed(decider.tick, moment, 50)  # 25 s: the next every=60 slot is 30 s on
    sweep, sweep_cpu = timed(decider.sweep, None, 20)
    report = {
        "built": started["built"], "first_tick": started["first_tick"], "first_won": len(first),
        "memory": started["memory"], "began": began_at, "ended": ended_at,
        "decided": decided_at,
        "won": [w.run.id for w in won],
        "idle": idle, "idle_cpu": idle_cpu, "sweep": sweep, "sweep_cpu": sweep_cpu,
    }  # fmt: skip
    print(json.dumps(report))
    backend.close()


def memory_instance(url: str, count: int, trace: bool, host: str = "standalone") -> None:
    """One instance's start-up alone (``--memory``): its memory per job, as JSON."""
    from relay.backends import open_backend
    from relay.contract import LeaseBackend

    backend = open_backend(url)
    assert isinstance(backend, LeaseBackend)
    backend.now()
    started = start(backend, count, (time.time() // 3600 - 2) * 3600 + 630, trace, host, url)
    keys = ("built", "first_tick", "memory", "traced", "top")
    print(json.dumps({key: started[key] for key in keys if key in started}))
    backend.close()


def memory(names: list[str], count: int, trace: bool, host: str = "standalone") -> None:
    """``--memory``: each store's start-up memory per job, one fresh process each (no race)."""
    if host == "beat":
        stock = stock_beat(count)["memory"] / count
        print(f"stock celery beat: {count:,} entries: {stock:,.0f} B/entry resident")
    for name in names:
        with store(name) as url:
            args = [sys.executable, __file__, "memory", url, str(count), str(int(trace)), host]
            report = json.loads(subprocess.run(args, stdout=subprocess.PIPE, check=True).stdout)
        took = f"built in {report['built']:.1f} s, first tick {report['first_tick']:.1f} s"
        if trace:  # tracemalloc's own bookkeeping is resident too: report only what it saw
            held = f"{report['traced'] / count:,.0f} B/job held by Python objects"
        else:
            held = f"{report['memory'] / count:,.0f} B/job resident"
        print(f"{name}: {count:,} jobs: {held} ({took})")
        for where, size, objects in report.get("top", []):
            print(f"  {size / count:7.1f} B/job {objects:8,} objects  {where}")


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


def race(url: str, count: int, processes: int, host: str) -> list[dict[str, Any]]:
    """Start ``processes`` instances (``host``: standalone or beat) on ``url``; their reports."""
    hour = (time.time() // 3600 - 2) * 3600
    start_at = time.time() + 20 + count / 2000  # time to build and tick once, on a busy machine
    if host == "beat":
        start_at += count / 4000  # Celery's entries take longer to build
    args = [url, str(count), str(hour + 630), str(start_at), host]
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "instance", *args, str(turn)], stdout=subprocess.PIPE
        )
        for turn in range(processes)
    ]
    return [json.loads(p.communicate(timeout=1800)[0]) for p in procs]


def measure(name: str, count: int, host: str = "standalone") -> list[Row]:
    """The rows of one backend: the full race, against the same race with 1 % of the jobs."""
    small = max(count // 100, 100)
    with store(name) as url:
        # As many instances as the measured race, so that wall times compare like with like.
        bases = race(url, small, INSTANCES, host)
    base = {key: max(r[key] for r in bases) for key in bases[0] if key != "won"}
    with store(name) as url:
        reports = race(url, count, INSTANCES, host)
    ids = [run for report in reports for run in report["won"]]
    once = len(ids) == len(set(ids)) == count // 10
    wall = max(r["ended"] for r in reports) - min(r["began"] for r in reports)
    worst = {key: max(r[key] for r in reports) for key in reports[0] if key != "won"}
    n = f"{count:,} jobs"
    b = f"{small:,} jobs"
    idle_cpu = worst["idle_cpu"] + worst["sweep_cpu"] / 10
    base_cpu = base["idle_cpu"] + base["sweep_cpu"] / 10
    if host == "beat":
        name = f"{name} beat"
        n = f"{count:,} entries"
        b = f"{small:,} entries"
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
        Row(name, f"sweep, no live run, wall (instances in turn), {n}", worst["sweep"] * 1e3, "ms",
            base["sweep"] * 1e3, b, "<= 2x (O(live runs))", ratio_at_most(2.0)),
        Row(name, f"idle CPU per instance (tick 1 s, sweep 10 s), {n}", idle_cpu * 100,
            "% of a core", base_cpu * 100, b),
        Row(name, f"memory per job above the baseline process, {n}", worst["memory"] / count,
            "B", base["memory"] / small, b, "<= 1024 B", at_most(1024)),
    ]  # fmt: skip
    if host == "beat":
        rows[0:2] = beat_rows(name, count, reports, once)
        stock = stock_beat(count)["memory"] / count
        rows[-1] = Row(
            name,
            f"memory per entry above the baseline process, {n}",
            worst["memory"] / count,
            "B",
            stock,
            "stock celery beat, same entries",
        )
        rows.append(Row(name, f"memory per entry above stock celery beat's, {n}",
                        worst["memory"] / count - stock, "B", None, "", "<= 1024 B",
                        at_most(1024)))  # fmt: skip
    for row in rows:
        print(f"{row.bench}: {row.figure}: {row.value:.4g} {row.unit} (baseline {row.baseline})",
              file=sys.stderr, flush=True)  # fmt: skip
    return rows


def beat_rows(name: str, count: int, reports: list[dict[str, Any]], once: bool) -> list[Row]:
    """Beat's start-up against stock beat's, and its raced tick: deciding, then publishing."""
    stock = stock_beat(count)
    began = min(r["began"] for r in reports)
    decided = max(r["decided"] for r in reports) - began
    start_up = max(r["built"] + r["first_tick"] for r in reports)
    return [
        Row(name, f"start-up: {count:,} entries built + first tick (slowest of {INSTANCES})",
            start_up, "s", stock["start-up"], "stock celery beat, same entries, alone"),
        Row(name, f"tick with 10 % due ({count // 10:,} runs), {INSTANCES} processes: every run "
            f"decided, wall (each won once: {once})", decided if once else float("inf"), "s",
            None, "", "<= 1 s", at_most(1.0)),
        Row(name, "the same tick, every run also published by its winner (memory://), wall",
            max(r["ended"] for r in reports) - began, "s"),
    ]  # fmt: skip


def stock_beat(count: int) -> dict[str, float]:
    """Stock Celery beat holding ``count`` entries, in a fresh process: its resident bytes and
    its start-up (the entries built and a first tick), alone."""
    args = [sys.executable, __file__, "stock", str(count)]
    found: dict[str, float] = json.loads(
        subprocess.run(args, stdout=subprocess.PIPE, check=True).stdout
    )
    return found


def rows(quick: bool = False) -> list[Row]:
    """Rows for PostgreSQL and Redis, standalone and Celery beat (``quick``: 20,000 jobs)."""
    count = 20_000 if quick else 100_000
    return [
        row
        for host in ("standalone", "beat")
        for name in ("postgres", "redis")
        for row in measure(name, count, host)
    ]


def main() -> None:
    """Run the chosen backends and print the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--only", nargs="*", choices=["sqlite", "postgres", "redis"],
                        default=["postgres", "redis"])  # fmt: skip
    parser.add_argument("--host", nargs="*", choices=["standalone", "beat"],
                        default=["standalone"])  # fmt: skip
    parser.add_argument(
        "--memory",
        action="store_true",
        help="only one instance's start-up memory per job (quick, no race)",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="with --memory: also the bytes Python objects hold, by line",
    )
    args = parser.parse_args()
    if args.memory:
        for host in args.host:
            memory(args.only, args.jobs, args.trace, host)
        return
    for host in args.host:
        for name in args.only:
            measure(name, args.jobs, host)


if __name__ == "__main__":
    if sys.argv[1:2] == ["instance"]:
        url, count, t0, start_at, host, turn = sys.argv[2:]
        instance(url, int(count), float(t0), float(start_at), host, int(turn))
    elif sys.argv[1:2] == ["stock"]:
        stock_beat_memory(int(sys.argv[2]))
    elif sys.argv[1:2] == ["memory"]:
        url, count, trace, host = sys.argv[2:]
        memory_instance(url, int(count), trace == "1", host)
    else:
        main()

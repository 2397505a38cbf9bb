"""A Celery queue on the Redis that Relay uses as its store: its throughput with and without Relay.

Usage: ``python bench/bench_shared_broker.py [-n TASKS] [--rate RUNS_PER_MINUTE] [--processes P]
[--rounds R] [--limit SECONDS]``.

On a ``redis-server`` of the benchmark's own, a Celery worker (solo pool) drains ``TASKS`` no-op
tasks published at once; the figure is tasks per second from the first publish to the last task
done (or to ``SECONDS``, when the tasks done so far count and the rest is purged). Then the same
again while ``P`` Relay processes (as ``P`` instances would) run Relay's steps for ``RATE`` runs a
minute between them (default 100,000): each process ticks ten times a second, acquires every run
of its own jobs that fell due since its last tick in one ``acquire_many`` (as the engine's tick
does), then starts and finishes each run it won, through the backend's calls the engine makes.
The runs take no time, so no heartbeat falls due: the engine sends none for them either. A process
that falls behind acquires what fell due meanwhile at its next tick, so the rate kept is the rate
reached; it is counted from a few seconds before each drain (Relay alone: the Redis server's CPU
over that window, ``INFO cpu``, divided by the runs finished in it is the server's time per Relay
run) to the drain's end, and is "met" only at ``RATE`` or more.

The ratio is the queue's throughput beside Relay over alone (1: Relay costs the queue nothing).
Every process shares the machine's cores, so the ratio holds Relay's client CPU as well as the
server's. Each round measures the pair in three arrangements, alternating (``ARRANGEMENTS``):
Relay on the queue's Redis with nothing pinned; the same with the queue's side (the worker and the
publisher) pinned to the first core and Relay's processes to the second (``os.sched_setaffinity``;
the Redis server is left free); and, the control, Relay on a second Redis of its own: what the
queue loses there is the machine's CPU, not its broker. Beside each throughput: the Redis server's
CPU and the median round trip of the publisher's ``GET`` to it, as the worker's calls see it.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

import redis  # noqa: E402
from celery import Celery  # noqa: E402

from bench.stores import private_redis  # noqa: E402
from bench.table import Row  # noqa: E402

BROKER = os.environ.get("RELAY_BENCH_BROKER", "redis://127.0.0.1:6379/0")
app = Celery("bench_shared_broker", broker=BROKER)
app.conf.update(
    task_ignore_result=True, worker_prefetch_multiplier=64, worker_hijack_root_logger=False
)

TICK = 0.1
"""Seconds between two ticks of one Relay process."""
JOBS = 1000
"""Jobs of each Relay process: each job has a run due every ``JOBS / rate`` seconds."""
LEASE = 30.0
"""The runs' lease: the engine's default (its heartbeat, 10 s, never falls due here)."""
RELAY_ALONE = 3.0
"""Seconds Relay runs alone before a drain beside it: the server's time per run."""
RATE_TARGET = 100_000
PROCESSES = 4
"""Relay processes sharing the load: one Python process does not keep 100,000 runs a minute on
this two-core machine beside a worker (it kept 54,000)."""

_counter: list[redis.Redis] = []


@app.task(name="bench.noop")
def noop() -> None:
    """A task that only counts itself done."""
    if not _counter:
        _counter.append(redis.Redis.from_url(BROKER))
    _counter[0].incr("bench:done")


def _server_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _process_cpu(pids: list[int]) -> float:
    """CPU seconds the processes ``pids`` used so far (all their threads)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def _pin(pid: int, cpus: set[int]) -> None:
    """Pin every thread of process ``pid`` to ``cpus``."""
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), cpus)


def relay_load(
    urls: list[str],
    share: int,
    per_second: float,
    go: Event,
    stop: Event,
    on: Synchronized[int],
    done: Synchronized[int],
) -> None:
    """One Relay process: while ``go`` is set, acquire, start and finish ``per_second`` runs a
    second of its own ``JOBS`` jobs on the Redis ``urls[on]``; count each run finished in
    ``done``; return once ``stop`` is set."""
    from relay.backends.redis_lease import RedisLeaseBackend
    from relay.contract import AcquireRequest

    backends = [RedisLeaseBackend.from_url(f"{url}?prefix=relay:") for url in urls]
    owner = f"bench-{share}"
    base = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(days=1)
    made = 0  # runs this process has acquired so far: the next is run number ``made``
    while not stop.is_set():
        if not go.wait(TICK):
            continue
        backend = backends[on.value]
        origin, origin_made = time.monotonic(), made  # a pause is not caught up
        while go.is_set() and not stop.is_set():
            tick_at = time.monotonic()
            due = origin_made + int((tick_at - origin) * per_second)
            requests = [
                AcquireRequest(
                    f"job{share}-{n % JOBS}", base + timedelta(seconds=n // JOBS), owner, LEASE
                )
                for n in range(made, due)
            ]
            made = max(made, due)
            if requests:
                for result in backend.acquire_many(requests):
                    if result.run is not None:
                        backend.start(result.run.id, result.run.token, owner, LEASE)
                        backend.finish(result.run.id, result.run.token, succeeded=True)
                        with done.get_lock():
                            done.value += 1
            time.sleep(max(0.0, TICK - (time.monotonic() - tick_at)))
    for backend in backends:
        backend.close()


@dataclass
class Relay:
    """The Relay processes, paused until :meth:`running` runs them."""

    urls: list[str]
    """The Redis servers they may run on."""
    pids: list[int]
    go: Event
    on: Synchronized[int]
    done: list[Synchronized[int]]

    def finished(self) -> int:
        """Runs finished so far by every process."""
        return sum(counter.value for counter in self.done)

    @contextmanager
    def running(self, on: int) -> Iterator[None]:
        """Run Relay's load on ``urls[on]`` for the block."""
        self.on.value = on
        self.go.set()
        try:
            yield
        finally:
            self.go.clear()


@contextmanager
def relay_processes(urls: list[str], processes: int, per_minute: int) -> Iterator[Relay]:
    """``processes`` Relay processes sharing ``per_minute`` runs a minute on one of ``urls``."""
    context = multiprocessing.get_context("spawn")
    go, stop, on = context.Event(), context.Event(), context.Value("i", 0)
    done = [context.Value("q", 0) for _ in range(processes)]
    per_second = per_minute / 60 / processes
    children = [
        context.Process(
            target=relay_load, args=(urls, share, per_second, go, stop, on, done[share])
        )
        for share in range(processes)
    ]
    for child in children:
        child.start()
    try:
        yield Relay(urls, [child.pid for child in children if child.pid is not None], go, on, done)
    finally:
        stop.set()
        for child in children:
            child.join(timeout=60)
            if child.is_alive():
                child.kill()


@dataclass(frozen=True)
class Drain:
    """One drain of the queue: tasks per second and the Redis server's share of a core."""

    tasks_per_second: float
    server_busy: float
    seconds: float
    relay_runs: int
    """Runs Relay finished meanwhile."""
    round_trip_ms: float
    """The median round trip of a ``GET`` to the queue's Redis meanwhile, from the publisher's
    process: the server's (and the machine's) answer time as the worker sees it."""


def drain(url: str, tasks: int, limit: float, relay: Relay | None = None) -> Drain:
    """Publish ``tasks`` at once and wait until the running worker has done them all, or for
    ``limit`` seconds: the throughput is the tasks done over the time taken (and the runs
    ``relay`` finished meanwhile are counted). Tasks left when the time is up are purged and
    those the worker holds are waited for, so the next drain starts from an empty queue."""
    client = redis.Redis.from_url(url)
    client.delete("bench:done")
    cpu = _server_cpu(client)
    runs = relay.finished() if relay else 0
    began = time.perf_counter()
    for _ in range(tasks):
        noop.delay()
    trips: list[float] = []
    while True:  # publishing may itself outlast the limit on a loaded machine
        sent = time.perf_counter()
        done = int(client.get("bench:done") or 0)
        trips.append(time.perf_counter() - sent)
        if done >= tasks or sent - began >= limit:
            break
        time.sleep(0.01)
    seconds = time.perf_counter() - began
    busy = (_server_cpu(client) - cpu) / seconds
    relay_runs = (relay.finished() - runs) if relay else 0
    result = Drain(done / seconds, busy, seconds, relay_runs, statistics.median(trips) * 1000)
    if done < tasks:
        print(f"  {done} of {tasks} tasks done in {limit:.0f} s: the rest purged", flush=True)
        app.control.purge()
        deadline = time.monotonic() + 120
        while True:  # the tasks the worker prefetched before the purge
            time.sleep(1)
            later = int(client.get("bench:done") or 0)
            if later == done or time.monotonic() > deadline:
                break
            done = later
    client.close()
    return result


@dataclass(frozen=True)
class Beside:
    """One drain beside Relay, and what Relay did meanwhile and alone just before."""

    drain: Drain
    kept: float
    """Runs a minute Relay finished while it ran alone and during the drain."""
    client_busy: float
    """Cores Relay's processes used during the drain."""
    alone_kept: float
    """Runs a minute Relay finished while it ran alone."""
    server_us_per_run: float
    """The Redis server's CPU per run finished while Relay ran alone (µs)."""


def drain_beside(url: str, tasks: int, limit: float, relay: Relay, on: int) -> Beside:
    """Run Relay on ``relay.urls[on]``, measure it alone for ``RELAY_ALONE`` seconds, then drain
    the queue on ``url`` beside it (for ``limit`` seconds at most)."""
    client = redis.Redis.from_url(relay.urls[on])
    with relay.running(on):
        time.sleep(1.5)  # past the first ticks
        cpu, runs, began = _server_cpu(client), relay.finished(), time.perf_counter()
        time.sleep(RELAY_ALONE)
        seconds = time.perf_counter() - began
        server, alone_runs = _server_cpu(client) - cpu, relay.finished() - runs
        clients, drained = _process_cpu(relay.pids), time.perf_counter()
        result = drain(url, tasks, limit, relay)
        client_busy = (_process_cpu(relay.pids) - clients) / (time.perf_counter() - drained)
    client.close()
    # Counted from the start of Relay's window alone to the drain's end: runs finish in bursts
    # each tick, so a window of a few seconds alone would miss or gain a tick's worth.
    kept = (alone_runs + result.relay_runs) / (seconds + result.seconds) * 60
    return Beside(
        result, kept, client_busy, alone_runs / seconds * 60, server / max(alone_runs, 1) * 1e6
    )


@dataclass(frozen=True)
class Pairs:
    """The drains of one arrangement (pinned or not), alternating alone and beside Relay."""

    alone: list[Drain]
    beside: list[Beside]

    @property
    def ratio(self) -> float:
        """Median throughput beside Relay over median alone."""
        alone = statistics.median(d.tasks_per_second for d in self.alone)
        return statistics.median(b.drain.tasks_per_second for b in self.beside) / alone

    def median(self, value: Callable[[Beside], float]) -> float:
        """The median of ``value`` over the drains beside Relay."""
        return statistics.median(value(b) for b in self.beside)


ARRANGEMENTS = {
    "free": "nothing pinned",
    "pinned": "Relay's clients on the other core",
    "apart": "Relay on a Redis of its own",
}
"""Where Relay's load runs beside the queue: on the queue's Redis with nothing pinned, on it with
the queue's side pinned to one core and Relay's processes to the other, or (the control) on a
second Redis, nothing pinned: the queue then loses only what Relay's clients and server take of
the machine's cores, not of its broker."""


def measure(
    tasks: int,
    per_minute: int,
    processes: int,
    rounds: int,
    *,
    apart: bool = True,
    limit: float = 120,
    budget: float = math.inf,
) -> dict[str, Pairs]:
    """``rounds`` rounds, each draining the queue alone then beside Relay in every arrangement
    (``ARRANGEMENTS``; ``apart``: with the control), each drain for ``limit`` seconds at most;
    no round begins once ``budget`` seconds have passed (the first always runs)."""
    began = time.monotonic()
    cpus = os.sched_getaffinity(0)
    first, rest = {min(cpus)}, cpus - {min(cpus)}
    names = ["free", "pinned"] if rest else ["free"]
    names += ["apart"] if apart else []
    results = {name: Pairs([], []) for name in names}
    with private_redis() as url, private_redis() as other, ExitStack() as stack:
        env = {**os.environ, "RELAY_BENCH_BROKER": url, "PYTHONPATH": f"{ROOT}:{ROOT / 'shared'}"}
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "bench.bench_shared_broker:app", "worker",
             "--pool", "solo", "--without-heartbeat", "--without-gossip", "--without-mingle",
             "--loglevel", "WARNING"],
            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            app.conf.update(broker_url=url)
            relay = stack.enter_context(relay_processes([url, other], processes, per_minute))
            drain(url, 200, 120)  # the worker is up and warm
            for round_ in range(rounds):
                if round_ and time.monotonic() - began > budget:
                    print(f"{round_} rounds only: the time budget of {budget:.0f} s is spent")
                    break
                for name in names:
                    queue_cpus, relay_cpus = (first, rest) if name == "pinned" else (cpus, cpus)
                    for pid in (worker.pid, os.getpid()):
                        _pin(pid, queue_cpus)
                    for pid in relay.pids:
                        _pin(pid, relay_cpus)
                    alone = drain(url, tasks, limit)
                    beside = drain_beside(url, tasks, limit, relay, int(name == "apart"))
                    results[name].alone.append(alone)
                    results[name].beside.append(beside)
                    print(
                        f"round {round_ + 1} {name}: alone {alone.tasks_per_second:.0f} "
                        f"tasks/s, Redis {alone.server_busy:.0%} of a core; beside Relay "
                        f"at {beside.kept:,.0f} runs/min "
                        f"{beside.drain.tasks_per_second:.0f} tasks/s "
                        f"({beside.drain.tasks_per_second / alone.tasks_per_second:.2f}x), "
                        f"queue's Redis {beside.drain.server_busy:.0%}, GET "
                        f"{alone.round_trip_ms:.2f} ms alone, {beside.drain.round_trip_ms:.2f} "
                        f"beside, Relay's clients "
                        f"{beside.client_busy:.0%} of a core; Relay alone "
                        f"{beside.alone_kept:,.0f} runs/min, its Redis "
                        f"{beside.server_us_per_run:.0f} µs a run; load average "
                        f"{os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
        finally:
            _pin(os.getpid(), cpus)
            worker.kill()
            worker.wait(timeout=30)
    if not rest:
        print("one core only here: Relay's processes cannot be pinned away from the worker")
    return results


def rows(quick: bool = False) -> list[Row]:
    """The queue's throughput beside Relay's load against the queue alone, the rate Relay kept
    and the Redis server's own time per Relay run, for each arrangement."""
    if quick:  # under two minutes even on a loaded machine
        results = measure(1000, RATE_TARGET, PROCESSES, 2, limit=8, budget=40)
    else:
        results = measure(5000, RATE_TARGET, PROCESSES, 3)
    table: list[Row] = []
    for name, pairs in results.items():
        where = ARRANGEMENTS[name]
        table += [
            Row(
                "shared broker",
                f"Celery queue throughput beside Relay at {RATE_TARGET:,} runs/min ({where})",
                pairs.median(lambda b: b.drain.tasks_per_second), "tasks/s",
                statistics.median(d.tasks_per_second for d in pairs.alone), "queue alone",
            ),
            Row(
                "shared broker", f"Relay runs kept beside the queue, least of the drains ({where})",
                min(b.kept for b in pairs.beside), "runs/min", target=f">= {RATE_TARGET:,}",
                check=lambda value, ratio: value >= RATE_TARGET,
            ),
            Row(
                "shared broker", f"queue's Redis server CPU during the drains ({where})",
                pairs.median(lambda b: b.drain.server_busy) * 100, "% of a core",
                statistics.median(d.server_busy for d in pairs.alone) * 100, "queue alone",
            ),
            Row(
                "shared broker", f"a GET's round trip to the queue's Redis, median ({where})",
                pairs.median(lambda b: b.drain.round_trip_ms), "ms",
                statistics.median(d.round_trip_ms for d in pairs.alone), "queue alone",
            ),
            Row(
                "shared broker", f"Redis server CPU per Relay run, Relay alone ({where})",
                pairs.median(lambda b: b.server_us_per_run), "µs",
            ),
            Row(
                "shared broker", f"Relay's client processes during the drains ({where})",
                pairs.median(lambda b: b.client_busy) * 100, "% of a core",
            ),
        ]  # fmt: skip
    return table


def main() -> None:
    """Parse the options and print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("-n", type=int, default=5000, help="tasks per drain")
    parser.add_argument("--rate", type=int, default=RATE_TARGET, help="Relay's runs a minute")
    parser.add_argument("--processes", type=int, default=PROCESSES, help="Relay processes")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of drains")
    parser.add_argument("--limit", type=float, default=120, help="seconds a drain lasts at most")
    options = parser.parse_args()
    results = measure(
        options.n, options.rate, options.processes, options.rounds, limit=options.limit
    )
    for name, pairs in results.items():
        kept = min(b.kept for b in pairs.beside)
        print(
            f"{name}: {pairs.ratio:.2f}x the queue's throughput beside Relay; Relay kept "
            f"{kept:,.0f} runs/min at least ({'met' if kept >= options.rate else 'NOT met'})"
        )


if __name__ == "__main__":
    main()

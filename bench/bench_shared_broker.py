"""A Celery queue on the Redis that Relay uses as its store: its throughput with and without Relay.

Usage: ``python bench/bench_shared_broker.py [-n TASKS] [--rate RUNS_PER_MINUTE]``.

On a ``redis-server`` of the benchmark's own, a Celery worker (solo pool) drains ``TASKS`` no-op
tasks published at once; the figure is tasks per second from the first publish to the last task
done. Then the same again while another process runs Relay's steps for ``RATE`` runs a minute
(default 100,000) on that Redis: each run acquired (in batches, as a tick does), started and
finished. The ratio is the queue's throughput with Relay over without (1: Relay costs the queue
nothing). Every process shares the machine's cores, so the ratio holds the clients' CPU as well as
the server's: the Redis server's own CPU (``INFO cpu``, a share of one core) is printed for each
drain to tell them apart; read both with the load average beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
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


def drain(url: str, tasks: int) -> tuple[float, float]:
    """Tasks per second (``tasks`` published at once and drained by the running worker), and the
    share of a core the Redis server used meanwhile."""
    client = redis.Redis.from_url(url)
    client.delete("bench:done")
    cpu = _server_cpu(client)
    began = time.perf_counter()
    for _ in range(tasks):
        noop.delay()
    deadline = time.monotonic() + 600
    while int(client.get("bench:done") or 0) < tasks:
        if time.monotonic() > deadline:
            raise RuntimeError("the worker did not drain the queue in 10 minutes")
        time.sleep(0.01)
    seconds = time.perf_counter() - began
    busy = (_server_cpu(client) - cpu) / seconds
    client.close()
    return tasks / seconds, busy


def relay_load(url: str, per_minute: int) -> None:
    """Run Relay's steps for ``per_minute`` runs a minute until the key ``bench:stop`` is set;
    print the rate kept."""
    from relay.backends.redis_lease import RedisLeaseBackend
    from relay.contract import AcquireRequest

    backend = RedisLeaseBackend.from_url(f"{url}?prefix=relay:")
    client = redis.Redis.from_url(url)
    batch, every = max(1, per_minute // 600), 0.1  # a tick every 0.1 s
    first = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(days=1)
    done, started, n = 0, time.monotonic(), 0
    while not client.exists("bench:stop"):
        tick_at = time.monotonic()
        requests = [
            AcquireRequest(f"job{i % 1000}", first + timedelta(seconds=n + i), "me", 30)
            for i in range(batch)
        ]
        n += batch
        for result in backend.acquire_many(requests):
            if result.run is not None:
                backend.start(result.run.id, result.run.token, "me", 30)
                backend.finish(result.run.id, result.run.token, succeeded=True)
                done += 1
        time.sleep(max(0.0, every - (time.monotonic() - tick_at)))
    print(json.dumps({"per_minute": done / (time.monotonic() - started) * 60}), flush=True)
    backend.close()
    client.close()


def measure(tasks: int, per_minute: int) -> tuple[float, float, float]:
    """Throughput without Relay, with Relay, and the Relay rate kept (runs a minute)."""
    with private_redis() as url:
        env = {**os.environ, "RELAY_BENCH_BROKER": url, "PYTHONPATH": f"{ROOT}:{ROOT / 'shared'}"}
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "bench.bench_shared_broker:app", "worker",
             "--pool", "solo", "--without-heartbeat", "--without-gossip", "--without-mingle",
             "--loglevel", "WARNING"],
            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            app.conf.broker_url = url
            drain(url, 200)  # the worker is up and warm
            alone, alone_cpu = drain(url, tasks)
            load = subprocess.Popen(
                [sys.executable, __file__, "load", url, str(per_minute)],
                stdout=subprocess.PIPE, env=env,
            )  # fmt: skip
            time.sleep(3)  # the load runs at its rate before the queue's tasks go out
            shared, shared_cpu = drain(url, tasks)
            redis.Redis.from_url(url).set("bench:stop", 1)
            kept = float(json.loads(load.communicate(timeout=900)[0])["per_minute"])
        finally:
            worker.kill()
            worker.wait(timeout=30)
    print(f"queue alone: {alone:.0f} tasks/s, Redis {alone_cpu:.0%} of a core; with Relay at "
          f"{kept:,.0f} runs/min: {shared:.0f} tasks/s ({shared / alone:.2f}x), Redis "
          f"{shared_cpu:.0%} of a core; load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    return alone, shared, kept


def rows(quick: bool = False) -> list[Row]:
    """The queue's throughput with Relay's load beside it, against the queue alone."""
    alone, shared, kept = measure(2000 if quick else 10_000, 100_000)
    figure = f"Celery queue throughput on the Relay store's Redis (Relay at {kept:,.0f} runs/min)"
    return [Row("shared broker", figure, shared, "tasks/s", alone, "queue alone")]


def main() -> None:
    """Parse the options and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10_000, help="tasks per drain")
    parser.add_argument("--rate", type=int, default=100_000, help="Relay's runs a minute")
    options = parser.parse_args()
    measure(options.n, options.rate)


if __name__ == "__main__":
    if sys.argv[1:2] == ["load"]:
        relay_load(sys.argv[2], int(sys.argv[3]))
    else:
        main()

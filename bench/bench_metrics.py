"""Metrics (and tracing): their cost on a run and on an idle tick, against events and metrics off.

Each configuration drives its own engine (``relay.engine.Loop`` + ``Runner``) on its own SQLite
file, with a clock that moves one second per run, so every step decides one new run of a job due
every second: acquire (won), start (started, a heartbeat thread), finish (succeeded), dispatched.
An idle tick is a step with nothing due. The configurations are interleaved run by run, so a busy
machine slows them alike; each step is timed call by call; medians are printed, and the mean of
the runs too (it includes the runs slowed by the metrics' flushing thread).

* ``off``: a bus with no subscriber (``EventBus(log=False)``): the events are built, not delivered;
* ``logged``: the default bus, which logs every event (INFO events filtered out by level);
* ``logged+metrics``: the default bus and ``relay.metrics.instrument`` (its own registry);
* ``logged+metrics+tracing`` (``--tracing``): and ``relay.tracing.instrument`` on an SDK tracer
  provider without exporter (spans are built and ended, sent nowhere).

Target: ``logged+metrics`` at most 1.05x ``off`` per run and per idle tick.

Metrics are counted off the run's path (queued, then applied at each scrape and every second by
a thread of their own): that thread runs during the timed runs, and the CPU it spends per run is
printed on its own line too, so the deferred cost is shown, not hidden.

    python bench/bench_metrics.py [--runs 2000] [--idle 200] [--repeat 3] [--multiprocess]

``--multiprocess`` sets PROMETHEUS_MULTIPROC_DIR (a temporary directory) first, as on a Celery
prefork or Dramatiq host: metric values are then written to memory-mapped files.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from relay.backends.sqlite import SQLiteLeaseBackend
from relay.engine import Decider, Loop, Runner, Won
from relay.events import EventBus, RunDispatched, RunStarted, RunSucceeded, RunWon
from relay.jobs import make_job

START = 1_800_000_000.0
"""A Unix time on a whole second: the first slot."""


@dataclass
class Engine:
    """One configuration: a loop and a runner on their own store and their own clock."""

    name: str
    loop: Loop
    runner: Runner
    clock: list[float]
    runs: list[float] = field(default_factory=list)
    idle: list[float] = field(default_factory=list)

    def send(self, won: Won) -> bool:
        self.runner.execute(won.run, _nothing, max_attempts=won.job.max_attempts)
        return True

    def run_once(self) -> None:
        """Time one step that decides, starts and finishes a run."""
        self.clock[0] += 1.0
        start = time.perf_counter()
        step = self.loop.step(self.send)
        self.runs.append(time.perf_counter() - start)
        assert len(step.won) == 1, step

    def idle_ticks(self, count: int) -> None:
        """Time ``count`` steps with nothing due; keep the mean of one."""
        step = self.loop.step
        send = self.send
        start = time.perf_counter()
        for _ in range(count):
            step(send)
        self.idle.append((time.perf_counter() - start) / count)


def _nothing(run: Any) -> None:
    pass


def engine(name: str, directory: Path, subscribe: Callable[[EventBus], None] | None) -> Engine:
    bus = EventBus(log=subscribe is not None)
    if subscribe is not None:
        subscribe(bus)
    backend = SQLiteLeaseBackend(directory / f"{name}.db")
    clock = [START]
    now = lambda: clock[0]  # noqa: E731
    decider = Decider(backend, owner="bench", lease=30, clock=now, events=bus)
    decider.add(make_job(backend, name="tick", handler=_nothing, every=1))
    loop = Loop(decider, interval=1.0, sweep_every=1e9)
    runner = Runner(backend, owner="bench", lease=30, heartbeat=3600, events=bus, clock=now)
    loop.step(lambda won: True)  # the first step reads the job's history and sweeps once
    return Engine(name, loop, runner, clock)


def configurations(tracing: bool) -> dict[str, Callable[[EventBus], None] | None]:
    from prometheus_client import CollectorRegistry

    from relay import metrics

    def logged(bus: EventBus) -> None:
        pass

    def with_metrics(bus: EventBus) -> None:
        metrics.instrument(bus, CollectorRegistry())

    found: dict[str, Callable[[EventBus], None] | None] = {
        "off": None,
        "logged": logged,
        "logged+metrics": with_metrics,
    }
    if tracing:
        from opentelemetry.sdk.trace import TracerProvider

        from relay import tracing as relay_tracing

        def with_tracing(bus: EventBus) -> None:
            with_metrics(bus)
            relay_tracing.instrument(bus, TracerProvider())

        found["logged+metrics+tracing"] = with_tracing
    return found


def one_round(runs: int, idle: int, tracing: bool) -> list[Engine]:
    with tempfile.TemporaryDirectory() as tmp:
        engines = [engine(n, Path(tmp), s) for n, s in configurations(tracing).items()]
        for n in range(runs):
            shift = n % len(engines)  # rotate who goes first
            for item in engines[shift:] + engines[:shift]:
                item.run_once()
            if n % 10 == 0:
                for item in engines[shift:] + engines[:shift]:
                    item.idle_ticks(idle)
        for item in engines:
            item.loop.decider.backend.close()
    return engines


def event_build_cost(samples: int = 20000) -> float:
    """Microseconds to build a run's four events (what ``off`` still pays)."""
    slot = datetime.fromtimestamp(START, timezone.utc)
    values = ("tick@x", "tick", slot, 1, 1, "bench")
    start = time.perf_counter()
    for _ in range(samples):
        RunWon(*values)
        RunStarted(*values, start_delay=0.0)
        RunSucceeded(*values, duration=0.0)
        RunDispatched(*values)
    return (time.perf_counter() - start) / samples * 1e6


def deferred_count_cost(samples: int = 20000) -> float:
    """Microseconds the metrics flush spends counting one run's events (off the run's path)."""
    from prometheus_client import CollectorRegistry

    from relay import metrics

    bus = EventBus(log=False)
    instrumentation = metrics.instrument(bus, CollectorRegistry())
    slot = datetime.fromtimestamp(START, timezone.utc)
    for n in range(samples):
        values = ("tick@x", "tick", slot, 1, n, "bench")
        for event in (
            RunWon(*values),
            RunStarted(*values, start_delay=0.01),
            RunSucceeded(*values, duration=0.01),
            RunDispatched(*values),
        ):
            bus.emit(event)
    start = time.perf_counter()
    instrumentation.flush()
    return (time.perf_counter() - start) / samples * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--idle", type=int, default=200, help="idle steps per idle sample")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tracing", action="store_true")
    parser.add_argument("--multiprocess", action="store_true")
    args = parser.parse_args()
    if args.multiprocess:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="relay-bench-prom-")
    mode = "multiprocess" if args.multiprocess else "single process"
    print(f"{args.runs} runs x {args.repeat} rounds, prometheus-client in {mode} mode")
    for round_ in range(1, args.repeat + 1):
        engines = one_round(args.runs, args.idle, args.tracing)
        base_run = statistics.median(engines[0].runs)
        base_mean = statistics.fmean(engines[0].runs)
        base_idle = statistics.median(engines[0].idle)
        print(f"round {round_}:")
        for item in engines:
            run, idle = statistics.median(item.runs), statistics.median(item.idle)
            mean = statistics.fmean(item.runs)
            print(
                f"  {item.name:<24} run {run * 1e6:7.1f} us {run / base_run:5.3f}x"
                f"  (mean {mean * 1e6:7.1f} us {mean / base_mean:5.3f}x)"
                f"   idle tick {idle * 1e6:5.2f} us {idle / base_idle:5.3f}x"
            )
    build = event_build_cost()
    print(f"building a run's 4 events (paid by 'off' too): {build:.1f} us")
    print(f"counting a run's events in the metrics (deferred): {deferred_count_cost():.1f} us")
    print("target: logged+metrics <= 1.05x off, per run and per idle tick")


if __name__ == "__main__":
    main()

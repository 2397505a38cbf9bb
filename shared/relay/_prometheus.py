"""The metric objects behind :mod:`relay.metrics`, and the counting of events into them.

Counting is deferred: a subscribed callback only appends the event to a queue (a run's four events
then cost well under a microsecond each), and the queue is applied to the metrics at every scrape
of the registry and, from a daemon thread, every :data:`FLUSH_EVERY` seconds (multiprocess mode,
where another process scrapes). A process that forks (Celery's prefork pool) starts its own thread
and its own queue at its first event.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from relay.errors import MissingDependency
from relay.events import (
    Event,
    FencedOff,
    RunAbandoned,
    RunExhausted,
    RunFailed,
    RunHandedOver,
    RunLeaseLost,
    RunSkipped,
    RunsMissed,
    RunStarted,
    RunSucceeded,
    RunTakenOver,
    StoreUnavailable,
)

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = [
    "COUNTED",
    "DURATION_BUCKETS",
    "FLUSH_EVERY",
    "START_DELAY_BUCKETS",
    "MetricSet",
    "flush_all",
    "prometheus",
]

FLUSH_EVERY = 1.0
"""Seconds between two applications of the queued events, besides each scrape."""
START_DELAY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600)
"""Seconds: from on time to an hour late (a queue backlog, a long downtime caught up)."""
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
"""Seconds: periodic jobs last from milliseconds to an hour."""
COUNTED: frozenset[type[Event]] = frozenset(
    {RunStarted, RunSucceeded, RunFailed, RunExhausted, RunSkipped, RunsMissed, RunTakenOver,
     RunHandedOver, FencedOff, RunAbandoned, RunLeaseLost, StoreUnavailable}
)  # fmt: skip
"""The event types that move a metric; the others are not even queued."""


def prometheus() -> Any:
    """The ``prometheus_client`` module, or ``MissingDependency`` naming the extra."""
    try:
        import prometheus_client
    except ImportError as exc:
        raise MissingDependency("prometheus-client", "metrics", needed_by="relay.metrics") from exc
    return prometheus_client


class MetricSet:
    """Relay's metrics in one registry, the queue of events not counted yet, and live runs."""

    def __init__(self, registry: CollectorRegistry, namespace: str) -> None:
        prom = prometheus()
        registry.register(_Flusher(self))  # first: a scrape applies the queue before reading
        kw: dict[str, Any] = {"registry": registry, "namespace": namespace}
        counter, histogram, gauge = prom.Counter, prom.Histogram, prom.Gauge
        self.runs = counter("runs", "Runs that ended, by outcome", ["job", "outcome"], **kw)
        self.attempts_failed = counter("attempts_failed", "Attempts that raised", ["job"], **kw)
        self.skipped = counter(
            "runs_skipped", "Runs recorded skipped (never run), by reason", ["job", "reason"], **kw
        )
        self.takeovers = counter("takeovers", "Runs taken over from a dead runner", ["job"], **kw)
        self.fenced = counter(
            "fenced_off", "Stale runners' operations the store refused", ["job", "operation"], **kw
        )
        self.abandoned = counter(
            "runs_abandoned", "Runs whose end the store could not record", ["job", "operation"],
            **kw,
        )  # fmt: skip
        self.leases_lost = counter(
            "leases_lost", "Runs let go as their lease could not be renewed in time", ["job"], **kw
        )
        self.store_down = counter("store_unavailable", "Times the store could not answer", **kw)
        self.start_delay = histogram(
            "run_start_delay_seconds", "Seconds from a run's slot to its start", ["job"],
            buckets=START_DELAY_BUCKETS, **kw,
        )  # fmt: skip
        self.duration = histogram(
            "run_duration_seconds", "Seconds from an attempt's start to its end",
            ["job", "outcome"], buckets=DURATION_BUCKETS, **kw,
        )  # fmt: skip
        self.last_success = gauge(
            "last_success_timestamp_seconds", "When a run of the job last succeeded (Unix time)",
            ["job"], multiprocess_mode="max", **kw,
        )  # fmt: skip
        # livesum: a host's live leases are those of its processes still alive; a dead worker's
        # leases are not held any more (another instance takes them over).
        self.live = gauge(
            "live_leases", "Runs started and not finished in this process",
            multiprocess_mode="livesum", **kw,
        )  # fmt: skip
        self.live_runs: set[tuple[str, int]] = set()
        self.jobs: dict[str, _Job] = {}
        self._children: dict[tuple[object, ...], Any] = {}
        self._count = _handlers(self)
        self._queue: deque[Event] = deque()
        self._lock = threading.Lock()
        _sets.add(self)

    def enqueue(self, event: Event) -> None:
        """Queue ``event`` to be counted: all a run's thread pays."""
        if not _flushing:
            _start_flushing()
        self._queue.append(event)

    def flush(self) -> None:
        """Count every queued event now, in the order they were emitted."""
        with self._lock:  # one flush at a time: a run's start is counted before its end
            queue = self._queue
            while queue:
                event = queue.popleft()
                self._count[type(event)](event)

    def forked(self) -> None:
        """In a forked child: drop the parent's queue and a lock its threads may have held."""
        self._queue = deque()
        self._lock = threading.Lock()

    def job(self, name: str) -> _Job:
        """The series of job ``name``, made at its first event."""
        found = self.jobs.get(name)
        if found is None:
            found = self.jobs[name] = _Job(self, name)
        return found

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, made once."""
        key = (id(metric), *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def started(self, key: tuple[str, int]) -> None:
        """A run started in this process (counted once however often it is reported)."""
        if key not in self.live_runs:
            self.live_runs.add(key)
            self.live.inc()

    def ended(self, key: tuple[str, int]) -> None:
        """A run of this process ended; nothing if it was not started here."""
        if key in self.live_runs:
            self.live_runs.discard(key)
            self.live.dec()


_sets: weakref.WeakSet[MetricSet] = weakref.WeakSet()
_flushing = False
_flushing_lock = threading.Lock()
_hooked = False


def _start_flushing() -> None:
    """Start this process's flushing thread, once (and, the first time, the fork and exit hooks)."""
    global _flushing, _hooked
    with _flushing_lock:
        if _flushing:
            return
        _flushing = True
        if not _hooked:  # inherited by forked children, so registered once per program
            _hooked = True
            os.register_at_fork(after_in_child=_after_fork)
            atexit.register(flush_all)
    threading.Thread(target=_flush_forever, name="relay-metrics", daemon=True).start()


def _flush_forever() -> None:
    while True:
        time.sleep(FLUSH_EVERY)
        flush_all()


def flush_all() -> None:
    """Count what every metric set of this process has queued."""
    for metric_set in list(_sets):
        metric_set.flush()


def _after_fork() -> None:
    global _flushing, _flushing_lock
    _flushing, _flushing_lock = False, threading.Lock()
    for metric_set in list(_sets):
        metric_set.forked()


class _Job:
    """One job's series; its run outcome counters are exported from 0 on."""

    def __init__(self, m: MetricSet, job: str) -> None:
        self.start_delay = m.start_delay.labels(job)
        self.succeeded = m.runs.labels(job, "succeeded")
        self.failed = m.runs.labels(job, "failed")
        self.exhausted = m.runs.labels(job, "exhausted")
        self.attempts_failed = m.attempts_failed.labels(job)
        self.took = m.duration.labels(job, "succeeded")
        self.took_failed = m.duration.labels(job, "failed")
        self.last_success = m.last_success.labels(job)


class _Flusher:
    """A collector that exports nothing: it applies the queue when the registry is scraped."""

    def __init__(self, metrics: MetricSet) -> None:
        self.metrics = metrics

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        self.metrics.flush()
        return iter(())


def _handlers(m: MetricSet) -> dict[type[Event], Callable[[Any], None]]:
    """What each event type moves."""

    def started(e: RunStarted) -> None:
        m.started((e.run_id, e.token))
        m.job(e.job).start_delay.observe(e.start_delay)

    def succeeded(e: RunSucceeded) -> None:
        m.ended((e.run_id, e.token))
        job = m.job(e.job)
        job.succeeded.inc()
        job.took.observe(e.duration)
        job.last_success.set(time.time())

    def failed(e: RunFailed) -> None:
        m.ended((e.run_id, e.token))
        job = m.job(e.job)
        job.attempts_failed.inc()
        job.took_failed.observe(e.duration)
        if e.final:
            job.failed.inc()

    def fenced(e: FencedOff) -> None:
        # The store refused this token: whatever the process still does, it holds no lease now.
        m.ended((e.run_id, e.token))
        m.child(m.fenced, e.job, e.operation or "unknown").inc()

    def abandoned(e: RunAbandoned) -> None:
        # This process holds the run no more: its lease runs out and another instance takes it.
        m.ended((e.run_id, e.token))
        m.child(m.abandoned, e.job, e.operation or "unknown").inc()

    def lease_lost(e: RunLeaseLost) -> None:
        # Let go: another instance may hold the run now, whatever the handler still does.
        m.ended((e.run_id, e.token))
        m.child(m.leases_lost, e.job).inc()

    return {
        RunStarted: started,
        RunSucceeded: succeeded,
        RunFailed: failed,
        RunExhausted: lambda e: m.job(e.job).exhausted.inc(),
        RunSkipped: lambda e: m.child(m.skipped, e.job, e.reason or "unknown").inc(),
        RunsMissed: lambda e: m.child(m.skipped, e.job, "missed").inc(e.count),
        RunTakenOver: lambda e: m.child(m.takeovers, e.job).inc(),
        RunHandedOver: lambda e: m.ended((e.run_id, e.token)),
        FencedOff: fenced,
        RunAbandoned: abandoned,
        RunLeaseLost: lease_lost,
        StoreUnavailable: lambda e: m.store_down.inc(),
    }

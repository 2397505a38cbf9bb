"""Prometheus metrics for Relay, counted from the engine's event stream.

``instrument(scheduler_or_bus)`` subscribes counters, histograms and a gauge to a
:class:`~relay.events.EventBus` (or anything with the same ``on(event_type, callback)``: the
standalone scheduler and the Celery and Dramatiq hook points). ``serve(port)`` exposes them over
HTTP. Needs ``pip install 'relay-scheduler[metrics]'``.

Several processes on one host (Celery's prefork pool, Dramatiq's worker processes, a beat): set
``PROMETHEUS_MULTIPROC_DIR`` to an empty directory in the environment of every one of them (before
they start: prometheus-client reads it when first imported), instrument in each, and serve once
per host; :func:`serve` then exposes the sum over the directory. ``python -m relay.metrics
--port 9100`` is such an exposition process on its own.

Metrics (every name starts with ``namespace``, ``relay`` by default):

==================================  ==========  ====================================================
``relay_runs_total``                counter     runs that ended, by ``job`` and ``outcome``:
                                                ``succeeded``, ``failed`` (last attempt raised),
                                                ``exhausted`` (last attempt died unfinished)
``relay_attempts_failed_total``     counter     attempts that raised, by ``job`` (retried or not)
``relay_runs_skipped_total``        counter     runs recorded never run, by ``job`` and ``reason``:
                                                ``overlap``, ``stale``, ``paused``, ``missed``
``relay_takeovers_total``           counter     runs this instance took over from a dead runner
``relay_fenced_off_total``          counter     operations of stale runners the store refused, by
                                                ``job`` and ``operation``
``relay_store_unavailable_total``   counter     times the store could not be reached
``relay_run_start_delay_seconds``   histogram   from a run's slot to its start, by ``job``
``relay_run_duration_seconds``      histogram   from an attempt's start to its end, by ``job``
                                                and ``outcome`` (``succeeded`` / ``failed``)
``relay_live_leases``               gauge       runs started and not finished in this process
                                                (multiprocess mode: summed over live processes)
``relay_last_success_timestamp_``   gauge       when a run of ``job`` last succeeded (Unix time;
``seconds``                                     multiprocess mode: the latest of any process)
==================================  ==========  ====================================================
"""

from __future__ import annotations

import argparse
import importlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from relay.errors import MissingDependency
from relay.events import (
    Event,
    FencedOff,
    RunExhausted,
    RunFailed,
    RunHandedOver,
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
    "DURATION_BUCKETS",
    "MULTIPROC_ENV",
    "START_DELAY_BUCKETS",
    "Instrumentation",
    "Subscribable",
    "instrument",
    "multiprocess_registry",
    "serve",
    "serve_forever",
]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""The environment variable that switches prometheus-client to its multiprocess mode."""
START_DELAY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600)
"""Seconds: from on time to an hour late (a queue backlog, a long downtime caught up)."""
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
"""Seconds: periodic jobs last from milliseconds to an hour."""

E = TypeVar("E", bound=Event)


class Subscribable(Protocol):
    """What :func:`instrument` attaches to: an EventBus, a scheduler, a Celery or Dramatiq hook."""

    def on(self, event_type: type[E], callback: Callable[[E], object]) -> Callable[[], None]:
        """Call ``callback`` for every event of ``event_type``; return an unsubscribe function."""
        ...


def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependency("prometheus-client", "metrics") from exc
    return prometheus_client


class _Metrics:
    """The metric objects of one registry, and the runs live in this process."""

    def __init__(self, registry: CollectorRegistry, namespace: str) -> None:
        prom = _prometheus()
        kw: dict[str, Any] = {"registry": registry, "namespace": namespace}
        self.runs = prom.Counter("runs", "Runs that ended, by outcome", ["job", "outcome"], **kw)
        self.attempts_failed = prom.Counter(
            "attempts_failed", "Attempts whose handler raised", ["job"], **kw
        )
        self.skipped = prom.Counter(
            "runs_skipped", "Runs recorded skipped (never run), by reason", ["job", "reason"], **kw
        )
        self.takeovers = prom.Counter(
            "takeovers", "Runs taken over after their runner's lease expired", ["job"], **kw
        )
        self.fenced = prom.Counter(
            "fenced_off", "Stale runners' operations the store refused", ["job", "operation"], **kw
        )
        self.store_down = prom.Counter(
            "store_unavailable", "Times the store could not be reached", [], **kw
        )
        self.start_delay = prom.Histogram(
            "run_start_delay_seconds", "Seconds from a run's slot to its start", ["job"],
            buckets=START_DELAY_BUCKETS, **kw,
        )  # fmt: skip
        self.duration = prom.Histogram(
            "run_duration_seconds", "Seconds from an attempt's start to its end",
            ["job", "outcome"], buckets=DURATION_BUCKETS, **kw,
        )  # fmt: skip
        # livesum: a host's live leases are those of its processes still alive; a dead worker's
        # leases are not held any more (another instance takes them over).
        self.live = prom.Gauge(
            "live_leases", "Runs started and not finished in this process",
            multiprocess_mode="livesum", **kw,
        )  # fmt: skip
        self.last_success = prom.Gauge(
            "last_success_timestamp_seconds", "When a run of the job last succeeded (Unix time)",
            ["job"], multiprocess_mode="max", **kw,
        )  # fmt: skip
        self._children: dict[tuple[object, ...], Any] = {}
        self._lock = threading.Lock()
        self._live: set[tuple[str, int]] = set()

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, cached: a run's events then cost a dict lookup each."""
        key = (id(metric), *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def started(self, key: tuple[str, int]) -> None:
        with self._lock:
            if key in self._live:
                return
            self._live.add(key)
        self.live.inc()

    def ended(self, key: tuple[str, int]) -> None:
        with self._lock:
            if key not in self._live:
                return  # not started here (a beat handing back a run), or already ended
            self._live.discard(key)
        self.live.dec()


_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, _Metrics] = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


def _metrics_for(registry: CollectorRegistry | None, namespace: str) -> _Metrics:
    """One set of metric objects per registry: instrumenting twice never registers twice."""
    if registry is None:
        registry = _prometheus().REGISTRY
    with _registry_lock:
        found = _by_registry.get(registry)
        if found is None:
            found = _by_registry[registry] = _Metrics(registry, namespace)
        return found


class Instrumentation:
    """The subscriptions :func:`instrument` made; :meth:`detach` removes them."""

    def __init__(self, metrics: _Metrics, unsubscribe: Sequence[Callable[[], object]]) -> None:
        self._metrics = metrics
        self._unsubscribe = list(unsubscribe)

    @property
    def live_leases(self) -> int:
        """Runs started and not finished in this process."""
        return len(self._metrics._live)

    def detach(self) -> None:
        """Stop counting this target's events (the metrics keep their values)."""
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()


def instrument(
    target: Subscribable, registry: CollectorRegistry | None = None, *, namespace: str = "relay"
) -> Instrumentation:
    """Count ``target``'s events in Prometheus metrics, in ``registry`` (default: the global one).

    ``target`` is an :class:`~relay.events.EventBus`, a :class:`~relay.Scheduler` or any other
    object with the same ``on(event_type, callback)``. Instrumenting several targets with one
    registry shares the metrics. Raises ``MissingDependency`` without prometheus-client.
    """
    m = _metrics_for(registry, namespace)

    def started(e: RunStarted) -> None:
        m.started((e.run_id, e.token))
        m.child(m.start_delay, e.job).observe(e.start_delay)

    def succeeded(e: RunSucceeded) -> None:
        m.ended((e.run_id, e.token))
        m.child(m.runs, e.job, "succeeded").inc()
        m.child(m.duration, e.job, "succeeded").observe(e.duration)
        m.child(m.last_success, e.job).set(time.time())

    def failed(e: RunFailed) -> None:
        m.ended((e.run_id, e.token))
        m.child(m.attempts_failed, e.job).inc()
        m.child(m.duration, e.job, "failed").observe(e.duration)
        if e.final:
            m.child(m.runs, e.job, "failed").inc()

    handlers: list[tuple[type[Any], Callable[[Any], None]]] = [
        (RunStarted, started),
        (RunSucceeded, succeeded),
        (RunFailed, failed),
        (RunExhausted, lambda e: m.child(m.runs, e.job, "exhausted").inc()),
        (RunSkipped, lambda e: m.child(m.skipped, e.job, e.reason or "unknown").inc()),
        (RunsMissed, lambda e: m.child(m.skipped, e.job, "missed").inc(e.count)),
        (RunTakenOver, lambda e: m.child(m.takeovers, e.job).inc()),
        (RunHandedOver, lambda e: m.ended((e.run_id, e.token))),
        (FencedOff, lambda e: _fenced(m, e)),
        (StoreUnavailable, lambda e: m.store_down.inc()),
    ]
    unsubscribe = [target.on(event_type, handler) for event_type, handler in handlers]
    return Instrumentation(m, [u for u in unsubscribe if callable(u)])


def _fenced(m: _Metrics, e: FencedOff) -> None:
    # The store refused this token: whatever the process still does, it holds no lease now.
    m.ended((e.run_id, e.token))
    m.child(m.fenced, e.job, e.operation or "unknown").inc()


# -- exposition ---------------------------------------------------------------------------------


def serve(
    port: int = 9100, addr: str = "0.0.0.0", registry: CollectorRegistry | None = None
) -> Any:
    """Expose the metrics over HTTP at ``http://addr:port/metrics`` from a daemon thread.

    With ``PROMETHEUS_MULTIPROC_DIR`` set, it exposes the sum over every process writing to that
    directory (call it once per host, e.g. in the Celery worker's main process); otherwise the
    ``registry`` (default: the global one). Returns the server (``.shutdown()`` stops it).
    """
    prom = _prometheus()
    if os.environ.get(MULTIPROC_ENV):
        registry = multiprocess_registry(os.environ[MULTIPROC_ENV])
    server, _thread = prom.start_http_server(port, addr=addr, registry=registry or prom.REGISTRY)
    return server


def multiprocess_registry(path: str) -> CollectorRegistry:
    """A registry summing every process's metrics in ``path``, forgetting dead processes' gauges.

    prometheus-client keeps a gauge file per process; a worker killed with SIGKILL never removes
    its own, so its live leases would be counted forever. Before each scrape, the files of
    processes that no longer exist on this host are dropped (counters and histograms keep theirs).
    """
    prom = _prometheus()
    multiprocess = importlib.import_module("prometheus_client.multiprocess")
    collector = multiprocess.MultiProcessCollector(None, path=path)

    class _Pruning:
        def collect(self) -> Any:
            for pid in _gauge_pids(path):
                if not _alive(pid):
                    multiprocess.mark_process_dead(pid, path)
            return collector.collect()

    registry: CollectorRegistry = prom.CollectorRegistry()
    registry.register(_Pruning())
    return registry


def _gauge_pids(path: str) -> set[int]:
    pids = set()
    for name in os.listdir(path):
        if name.startswith("gauge_live") and name.endswith(".db"):
            pid = name[: -len(".db")].rpartition("_")[2]
            if pid.isdigit():
                pids.add(int(pid))
    return pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive
    return True


def serve_forever() -> None:
    """Serve on ``RELAY_METRICS_PORT`` (default 9100) until killed: a Dramatiq fork function.

    ``dramatiq app --fork-function relay.metrics:serve_forever`` adds it to Dramatiq's processes.
    """
    serve(int(os.environ.get("RELAY_METRICS_PORT", "9100")))
    _sleep_forever()


def _sleep_forever() -> None:
    while True:
        time.sleep(3600)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m relay.metrics [--port 9100]``: expose PROMETHEUS_MULTIPROC_DIR on this host."""
    parser = argparse.ArgumentParser(prog="python -m relay.metrics", description=main.__doc__)
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--addr", default="0.0.0.0")
    args = parser.parse_args(argv)
    if not os.environ.get(MULTIPROC_ENV):
        parser.error(f"set {MULTIPROC_ENV} to the directory the instrumented processes write to")
    serve(args.port, args.addr)
    _sleep_forever()


if __name__ == "__main__":
    main()

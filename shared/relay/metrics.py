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
``relay_runs_abandoned_total``      counter     runs whose end the store could not record, by
                                                ``job`` and ``operation`` (``finish``, ``release``)
``relay_leases_lost_total``         counter     runs let go as their lease could not be renewed
                                                in time (the store did not answer), by ``job``
``relay_store_unavailable_total``   counter     times the store could not be reached
``relay_run_start_delay_seconds``   histogram   from a run's slot to its start, by ``job``
``relay_run_duration_seconds``      histogram   from an attempt's start to its end, by ``job``
                                                and ``outcome`` (``succeeded`` / ``failed``)
``relay_live_leases``               gauge       runs started and not finished in this process
                                                (multiprocess mode: summed over live processes)
``relay_last_success_timestamp_``   gauge       when a run of ``job`` last succeeded (Unix time;
``seconds``                                     multiprocess mode: the latest of any process)
==================================  ==========  ====================================================

Read from the store at each scrape, once :func:`export_jobs` is called (or ``python -m
relay.metrics --backend URL`` runs, anywhere that reaches the store), by ``job``
(:mod:`relay.overdue`; ``relay alert-rules --prometheus`` prints rules on them):

====================================================  =============================================
``relay_job_last_success_timestamp_seconds``          when its latest successful run finished
``relay_job_expected_success_by_timestamp_seconds``   when its oldest slot not yet succeeded should
                                                      have succeeded (``+Inf``: no expectation)
``relay_job_overdue``, ``relay_job_failing``          1 while the job is overdue / failing, else 0
====================================================  =============================================
"""

from __future__ import annotations

import argparse
import importlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from relay._job_metrics import JobHealthCollector
from relay._prometheus import (
    COUNTED,
    DURATION_BUCKETS,
    START_DELAY_BUCKETS,
    MetricSet,
    flush_all,
    prometheus,
)
from relay.backends import open_backend
from relay.contract import ClaimBackend, LeaseBackend, is_lease
from relay.errors import UnsupportedOption
from relay.events import Event, Subscribable

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = [
    "DURATION_BUCKETS",
    "MULTIPROC_ENV",
    "START_DELAY_BUCKETS",
    "Instrumentation",
    "JobHealthCollector",
    "Subscribable",
    "export_jobs",
    "flush",
    "instrument",
    "multiprocess_registry",
    "serve",
    "serve_forever",
]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""The environment variable that switches prometheus-client to its multiprocess mode."""


class Instrumentation:
    """Counts one target's events; :meth:`detach` stops it.

    The subscribed callback only queues the events that move a metric; they are counted at each
    scrape and every second (:meth:`flush` counts them now).
    """

    def __init__(self, metrics: MetricSet) -> None:
        self._metrics = metrics
        self._unsubscribe: Callable[[], object] | None = None

    def __call__(self, event: Event) -> None:
        """Queue ``event`` if it moves a metric."""
        if type(event) in COUNTED:
            self._metrics.enqueue(event)

    @property
    def live_leases(self) -> int:
        """Runs started and not finished in this process."""
        self.flush()
        return len(self._metrics.live_runs)

    def flush(self) -> None:
        """Count the queued events now."""
        self._metrics.flush()

    def detach(self) -> None:
        """Stop counting this target's events (the metrics keep their values)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None


def flush() -> None:
    """Count every event this process has queued, now (it happens every second on its own).

    For a process that ends without running ``atexit`` handlers, such as a Celery prefork child:
    connect it to ``celery.signals.worker_process_shutdown``.
    """
    flush_all()


_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, MetricSet] = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


def _metrics_for(registry: CollectorRegistry | None, namespace: str) -> MetricSet:
    """One set of metric objects per registry: instrumenting twice never registers twice."""
    if registry is None:
        registry = prometheus().REGISTRY
    with _registry_lock:
        found = _by_registry.get(registry)
        if found is None:
            found = _by_registry[registry] = MetricSet(registry, namespace)
        return found


def instrument(
    target: Subscribable, registry: CollectorRegistry | None = None, *, namespace: str = "relay"
) -> Instrumentation:
    """Count ``target``'s events in Prometheus metrics, in ``registry`` (default: the global one).

    ``target`` is an :class:`~relay.events.EventBus`, a :class:`~relay.Scheduler` or any other
    object with the same ``on(event_type, callback)``. Instrumenting several targets with one
    registry shares the metrics. Raises ``MissingDependency`` without prometheus-client.
    """
    instrumentation = Instrumentation(_metrics_for(registry, namespace))
    unsubscribe = target.on(Event, instrumentation)
    instrumentation._unsubscribe = unsubscribe if callable(unsubscribe) else None
    return instrumentation


def export_jobs(
    backend: str | ClaimBackend | LeaseBackend,
    registry: CollectorRegistry | None = None,
    *,
    namespace: str = "relay",
    cache: float = 15.0,
) -> JobHealthCollector:
    """Export each job's standing, read from the store at each scrape (at most every ``cache``
    seconds), in ``registry`` (default: the global one). ``backend`` is a lease store's URL
    (opened read-only) or backend object. Returns the collector (``registry.unregister`` it to
    stop)."""
    if isinstance(backend, str):
        backend = open_backend(backend, read_only=True)
    if not is_lease(backend):
        raise UnsupportedOption("export_jobs", backend.name, ("a lease backend",))
    collector = JobHealthCollector(backend, namespace=namespace, cache=cache)
    (registry or prometheus().REGISTRY).register(collector)
    return collector


# -- exposition ---------------------------------------------------------------------------------


def serve(
    port: int = 9100, addr: str = "0.0.0.0", registry: CollectorRegistry | None = None
) -> Any:
    """Expose the metrics over HTTP at ``http://addr:port/metrics`` from a daemon thread.

    With ``PROMETHEUS_MULTIPROC_DIR`` set, it exposes the sum over every process writing to that
    directory (call it once per host, e.g. in the Celery worker's main process); otherwise the
    ``registry`` (default: the global one). Returns the server (``.shutdown()`` stops it).
    """
    prom = prometheus()
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
    prom = prometheus()
    multiprocess = importlib.import_module("prometheus_client.multiprocess")
    collector = multiprocess.MultiProcessCollector(None, path=path)

    class _Pruning:
        def collect(self) -> Any:
            flush_all()  # this process's own queued events, if it counts any
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
    """``python -m relay.metrics [--port 9100] [--backend URL]``: expose PROMETHEUS_MULTIPROC_DIR
    on this host, and with ``--backend`` each job's standing read from that store."""
    parser = argparse.ArgumentParser(prog="python -m relay.metrics", description=main.__doc__)
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--addr", default="0.0.0.0")
    parser.add_argument("--backend", default=os.environ.get("RELAY_BACKEND"))
    args = parser.parse_args(argv)
    if not os.environ.get(MULTIPROC_ENV) and not args.backend:
        parser.error(
            f"set {MULTIPROC_ENV} to the directory the instrumented processes write to, "
            "or give --backend URL to export the jobs' standing from the store"
        )
    prom = prometheus()
    registry = (
        multiprocess_registry(os.environ[MULTIPROC_ENV])
        if os.environ.get(MULTIPROC_ENV)
        else prom.CollectorRegistry()
    )
    if args.backend:
        export_jobs(args.backend, registry)
    prom.start_http_server(args.port, addr=args.addr, registry=registry)
    _sleep_forever()


if __name__ == "__main__":
    main()

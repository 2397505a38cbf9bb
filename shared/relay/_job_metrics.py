"""Gauges of each job's standing, read from the store at each scrape (:mod:`relay.overdue`).

Unlike the counters of :mod:`relay.metrics`, which count what one process saw, these come from the
store: any process that reaches it exports the same values, an exporter outside the fleet too.
A read is kept for ``cache`` seconds, so several scrapes cost the store one read. When the store
does not answer, the gauges are left out of the scrape (Prometheus keeps their last values for
``last_over_time``) and the error is logged.
"""

from __future__ import annotations

import importlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from relay._prometheus import prometheus
from relay.contract import LeaseBackend
from relay.errors import RelayError
from relay.overdue import JobHealth, read_health

__all__ = ["JobHealthCollector"]

log = logging.getLogger("relay.metrics")


class JobHealthCollector:
    """A Prometheus collector of every job's last success, expected success and alert state."""

    def __init__(
        self,
        backend: LeaseBackend,
        *,
        namespace: str = "relay",
        cache: float = 15.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.namespace = namespace
        self.cache = cache
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._read: tuple[float, list[JobHealth]] | None = None

    def describe(self) -> list[Any]:
        return []  # read nothing when registered: the first scrape reads the store

    def collect(self) -> Iterator[Any]:
        found = self._health()
        if found is None:
            return
        prometheus()  # installed, or MissingDependency naming the extra
        core = importlib.import_module("prometheus_client.core")
        ns = self.namespace
        last = core.GaugeMetricFamily(
            f"{ns}_job_last_success_timestamp_seconds",
            "When the job's latest successful run finished (Unix time), read from the store",
            labels=["job"],
        )
        expected = core.GaugeMetricFamily(
            f"{ns}_job_expected_success_by_timestamp_seconds",
            "When the job's oldest slot not yet succeeded should have succeeded (Unix time; "
            "+Inf: no expectation); alert on time() > it",
            labels=["job"],
        )
        overdue = core.GaugeMetricFamily(
            f"{ns}_job_overdue", "1 if the job is overdue, else 0", labels=["job"]
        )
        failing = core.GaugeMetricFamily(
            f"{ns}_job_failing", "1 if the job is failing, else 0", labels=["job"]
        )
        for h in found:
            if h.last_success is not None:
                last.add_metric([h.job], h.last_success.timestamp())
            by = h.expected_by
            live = h.state in ("ok", "overdue", "failing") and by is not None
            expected.add_metric([h.job], by.timestamp() if live and by else math.inf)
            overdue.add_metric([h.job], float(h.overdue))
            failing.add_metric([h.job], float(h.failing))
        yield from (last, expected, overdue, failing)

    def _health(self) -> list[JobHealth] | None:
        with self._lock:
            now = self._monotonic()
            if self._read is not None and now - self._read[0] < self.cache:
                return self._read[1]
            try:
                found = read_health(self.backend)
            except RelayError as exc:
                log.warning("could not read the jobs' standing from the store: %s", exc)
                return None
            self._read = (now, found)
            return found

"""Real ``dramatiq`` worker processes and a ``relay-dramatiq`` scheduler writing metrics to one
multiprocess directory, exposed by Dramatiq's own fork-function process and scraped over HTTP;
each run's span is a child of the scheduler's publish span.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.dramatiq.procs import Deployment
from tests.dramatiq.test_processes import _redis_broker
from tests.metrics.spans import assert_runs_are_children_of_their_publish
from tests.metrics.test_multiprocess import scrape_until
from tests.support.backends import unique
from tests.support.ports import free_port

pytestmark = [pytest.mark.slow, pytest.mark.redis]

APP = "tests.metrics.dramatiq_app"


def test_dramatiq_worker_processes_metrics_over_http(tmp_path: Path) -> None:
    queue = unique("relay_dqm")
    prom = tmp_path / "prom"
    prom.mkdir()
    port = free_port()
    jobs = {"tick": {"every": 1}, "boom": {"every": 1, "fail": True, "max_attempts": 1}}
    with _redis_broker(queue) as broker_url:
        d = Deployment(tmp_path, "redis", broker_url, queue, f"sqlite:///{tmp_path / 'r.db'}", jobs)
        env = d.env
        d.env = lambda: {  # type: ignore[method-assign]
            **env(),
            "PROMETHEUS_MULTIPROC_DIR": str(prom),
            "RELAY_METRICS_PORT": str(port),
            "RELAY_T_SPANS": str(tmp_path / "spans.jsonl"),
        }
        try:
            serve = ["--fork-function", "relay.metrics:serve_forever"]
            d._start(
                "worker", [sys.executable, "-m", "dramatiq", APP, "-p", "2", "-t", "2", *serve]
            )
            d._start("scheduler", [sys.executable, "-m", "relay_dramatiq", APP])
            d.wait_for("3 runs of tick", lambda: len(d.events("done")) >= 3)
            ok = 'relay_runs_total{job="tick",outcome="succeeded"}'
            samples = scrape_until(port, ok, 3)
            samples = scrape_until(port, 'relay_runs_total{job="boom",outcome="failed"}', 1)
        finally:
            d.close()
    assert samples[ok] >= 3
    assert samples['relay_attempts_failed_total{job="boom"}'] >= 1
    assert samples['relay_run_start_delay_seconds_count{job="tick"}'] >= 3
    assert_runs_are_children_of_their_publish(tmp_path / "spans.jsonl", "tick", 3)

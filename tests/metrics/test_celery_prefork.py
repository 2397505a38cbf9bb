"""Real ``celery beat`` and a prefork ``celery worker``: metrics summed over the worker's processes
and scraped over HTTP from an exposition process; each run's span is a child of beat's publish.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.celery_integration import cluster as cluster_module
from tests.celery_integration.cluster import cluster
from tests.metrics.spans import assert_runs_are_children_of_their_publish
from tests.metrics.test_multiprocess import scrape_until
from tests.support import services
from tests.support.ports import free_port
from tests.support.procs import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.redis]


def test_prefork_workers_metrics_and_traces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster_module, "APP", "tests.metrics.celery_app")
    prom = tmp_path / "prom"
    prom.mkdir()
    spans = tmp_path / "spans.jsonl"
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    port = free_port()
    with cluster(tmp_path, services.require("redis"), url, {"tick": {"every": 1}}) as c:
        c.env["PROMETHEUS_MULTIPROC_DIR"] = str(prom)
        c.env["RELAY_T_SPANS"] = str(spans)
        c.beat()
        c.worker(pool="prefork", concurrency=2)
        command = [sys.executable, "-m", "relay.metrics", "--port", str(port)]
        exposer = subprocess.Popen(command, env=c.env, cwd=ROOT, start_new_session=True)
        c.processes.append(exposer)  # type: ignore[arg-type]
        c.wait_for("4 runs", lambda: len(c.events("end")) >= 4)
        samples = scrape_until(port, 'relay_runs_total{job="tick",outcome="succeeded"}', 4)
        ran = len(c.events("end"))
    assert samples['relay_run_start_delay_seconds_count{job="tick"}'] >= 4
    assert samples['relay_runs_total{job="tick",outcome="succeeded"}'] <= ran
    assert "relay_live_leases" in samples

    assert_runs_are_children_of_their_publish(spans, "tick", 4)

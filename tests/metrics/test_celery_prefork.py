"""Real ``celery beat`` and a prefork ``celery worker``: metrics summed over the worker's processes
and scraped over HTTP from an exposition process; each run's span is a child of beat's publish.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.celery_integration import cluster as cluster_module
from tests.celery_integration.cluster import cluster
from tests.metrics.test_multiprocess import free_port, scrape
from tests.support import services
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
        c.wait_for(
            "the runs in the metrics",
            lambda: scrape(port).get('relay_runs_total{job="tick",outcome="succeeded"}', 0) >= 4,
        )
        samples = scrape(port)
        ran = len(c.events("end"))
    pids = {e["pid"] for e in c.events("end")}
    assert samples['relay_run_start_delay_seconds_count{job="tick"}'] >= 4
    assert samples['relay_runs_total{job="tick",outcome="succeeded"}'] <= ran
    assert "relay_live_leases" in samples

    lines = [json.loads(line) for line in spans.read_text().splitlines()]
    publish = {s["attributes"]["relay.run_id"]: s for s in lines if s["name"] == "tick publish"}
    runs = [s for s in lines if s["name"] == "tick run"]
    assert len(runs) >= 4
    for span in runs:
        parent = publish[span["attributes"]["relay.run_id"]]
        assert (span["trace"], span["parent"]) == (parent["trace"], parent["span"])
        assert span["pid"] != parent["pid"] and span["status"] == "OK"
    assert Counter(s["pid"] for s in runs).keys() <= pids

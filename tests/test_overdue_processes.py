"""With every instance killed, each of the three ways reports the overdue job.

Two real instances run ``export`` every second (``expect_success_within=2``) and ping a local
Healthchecks; both are killed with SIGKILL. Then, with no instance left:

1. ``relay overdue`` (what a cron on another host runs) exits 1 and names the job, its slot and
   what became of it;
2. ``python -m relay.metrics --backend URL`` (an exporter outside the fleet) exports an expected
   success time in the past: the rule ``relay alert-rules --prometheus`` prints, ``time() >
   expected``, holds;
3. Healthchecks received no ping after the kill, so it shows the check down once its period and
   grace pass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from relay import Control
from relay.overdue import JobHealth
from relay.prometheus_rules import prometheus_rules
from tests.support.fake_monitors import API_KEY, fake_services
from tests.support.ports import free_port
from tests.support.procs import ROOT

UTC = timezone.utc


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}


def start(name: str, url: str, log: Path, api_url: str) -> subprocess.Popen[bytes]:
    args = {"name": name, "url": url, "log": str(log), "api_url": api_url, "api_key": API_KEY}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.monitored_instance", json.dumps(args)],
        cwd=ROOT, env=env(),
    )  # fmt: skip


def relay_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", *args], capture_output=True, text=True, env=env(),
        cwd=ROOT, timeout=60,
    )  # fmt: skip


def health(url: str) -> list[JobHealth]:
    with Control(url, read_only=True) as control:
        return control.health()


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def scrape(port: int) -> dict[str, float]:
    """The exporter's job gauges of ``export``, by metric name."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = {}
    for line in text.splitlines():
        if line.startswith("relay_job_") and 'job="export"' in line:
            name, _, value = line.rpartition(" ")
            found[name.partition("{")[0]] = float(value)
    return found


@pytest.mark.slow
def test_every_instance_killed_and_the_three_ways_report_the_overdue_job(
    lease_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "runs.log"
    with fake_services() as services:
        fleet = [start(name, lease_url, log, services.url) for name in ("a", "b")]
        try:
            wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= 3, 60, "runs")
            assert not any(h.alerting for h in health(lease_url))
        finally:
            for proc in fleet:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
        killed = datetime.now(UTC)

        # 1. relay overdue, from outside the fleet.
        wait_for(lambda: any(h.overdue for h in health(lease_url)), 30, "the job to be overdue")
        answer = relay_cli("overdue", "--backend", lease_url, "--json")
        assert answer.returncode == 1, answer.stderr
        [job] = json.loads(answer.stdout)
        assert (job["job"], job["state"], job["overdue"]) == ("export", "overdue", True)
        assert job["outcome"] in ("no record", "running", "missed"), job
        slot = datetime.fromisoformat(job["slot"])
        assert killed - timedelta(seconds=5) < slot <= killed + timedelta(seconds=1)

        # 2. Prometheus: an exporter outside the fleet, and the rule's comparison.
        port = free_port()
        exporter = subprocess.Popen(
            [sys.executable, "-m", "relay.metrics", "--backend", lease_url, "--port", str(port)],
            cwd=ROOT, env=env(),
        )  # fmt: skip
        try:
            gauges: dict[str, float] = {}

            def exported() -> bool:
                nonlocal gauges
                try:
                    gauges = scrape(port)
                except OSError:
                    return False
                return bool(gauges)

            wait_for(exported, 30, "the exporter")
        finally:
            exporter.terminate()
            exporter.wait(timeout=30)
        expected = gauges["relay_job_expected_success_by_timestamp_seconds"]
        assert time.time() > expected  # the rule: time() > expected success time
        assert expected == datetime.fromisoformat(job["expected_by"]).timestamp()
        assert gauges["relay_job_last_success_timestamp_seconds"] <= killed.timestamp()
        assert gauges["relay_job_overdue"] == 1.0
        assert "time() > max by (job)" in prometheus_rules()

        # 3. Healthchecks: no ping since the kill, so down once its period and grace passed.
        check = services.healthchecks.checks["export"]
        last = max(at for _, _, at in check.pings)
        assert last <= killed + timedelta(seconds=1)
        assert services.healthchecks.status("export", last) == "up"
        period = timedelta(seconds=check.body["timeout"] + check.body["grace"])
        assert services.healthchecks.status("export", last + period + timedelta(seconds=1)) == (
            "down"
        )

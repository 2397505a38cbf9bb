"""Metrics scraped over HTTP from real processes: a standalone scheduler, and multiprocess mode.

In multiprocess mode, real processes write and one exposition process sums them over HTTP.

The live-leases gauge is summed over live processes only: a SIGKILLed worker's leases are not
held any more, and its file is dropped at the next scrape; its counters stay.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay import metrics
from tests.support.ports import free_port
from tests.support.procs import ROOT

pytestmark = pytest.mark.slow


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    directory = tmp_path / "prom"
    directory.mkdir()
    return {**os.environ, "PYTHONPATH": str(ROOT), "PROMETHEUS_MULTIPROC_DIR": str(directory)}


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


def emitter(env: dict[str, str], job: str, *tokens: int) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "tests.metrics.emitter", job, *map(str, tokens)]
    process = subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process


def scrape(port: int, timeout: float = 30.0) -> dict[str, float]:
    """The samples at /metrics, by ``name{labels}``; waits for the server to answer."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, number = line.rpartition(" ")
            samples[name] = float(number)
    return samples


def scrape_until(port: int, key: str, at_least: float, timeout: float = 60.0) -> dict[str, float]:
    """Scrape until the sample ``key`` reaches ``at_least``; return the last samples."""
    deadline = time.monotonic() + timeout
    while (samples := scrape(port)).get(key, 0) < at_least:
        assert time.monotonic() < deadline, f"{key} never reached {at_least}: {samples}"
        time.sleep(0.2)
    return samples


def test_an_exposition_process_sums_the_hosts_processes_and_forgets_dead_leases(
    env: dict[str, str], processes: list[subprocess.Popen[str]]
) -> None:
    port = free_port()
    processes.append(emitter(env, "a", 1, 2))  # one finished run, one live lease
    killed = emitter(env, "a", 3, 4, 5)  # one finished run, two live leases
    processes.append(killed)
    command = [sys.executable, "-m", "relay.metrics", "--port", str(port), "--addr", "127.0.0.1"]
    processes.append(subprocess.Popen(command, env=env, cwd=ROOT))

    before = scrape(port)
    assert before["relay_live_leases"] == 3
    assert before['relay_runs_total{job="a",outcome="succeeded"}'] == 2
    assert before['relay_takeovers_total{job="a"}'] == 2
    assert before['relay_run_start_delay_seconds_count{job="a"}'] == 5

    killed.send_signal(signal.SIGKILL)
    killed.wait(10)
    after = scrape(port)
    assert after["relay_live_leases"] == 1
    assert after['relay_runs_total{job="a",outcome="succeeded"}'] == 2
    assert after['relay_run_start_delay_seconds_count{job="a"}'] == 5


def test_the_exposition_process_refuses_to_start_without_the_directory(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env["PYTHONPATH"] = str(ROOT)
    result = subprocess.run(
        [sys.executable, "-m", "relay.metrics", "--port", "0"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "PROMETHEUS_MULTIPROC_DIR" in result.stderr


def test_a_standalone_scheduler_process_serves_its_runs(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env["PYTHONPATH"] = str(ROOT)
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    command = [sys.executable, "-m", "tests.metrics.standalone", url, str(port)]
    processes.append(subprocess.Popen(command, env=env, cwd=ROOT, stderr=subprocess.DEVNULL))

    samples = scrape_until(port, 'relay_runs_total{job="ok",outcome="succeeded"}', 3)
    assert samples['relay_runs_total{job="boom",outcome="failed"}'] >= 1
    assert samples['relay_attempts_failed_total{job="boom"}'] >= 1
    assert samples['relay_run_start_delay_seconds_count{job="ok"}'] >= 3
    assert samples['relay_last_success_timestamp_seconds{job="ok"}'] > time.time() - 60
    assert samples["relay_live_leases"] in (0, 1, 2)


def test_a_forked_child_counts_its_own_events_and_not_its_parents(env: dict[str, str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.metrics.forker"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    parent, child = result.stdout.split()
    registry = metrics.multiprocess_registry(env["PROMETHEUS_MULTIPROC_DIR"])
    count = "relay_run_start_delay_seconds_count"
    assert registry.get_sample_value(count, {"job": "parent"}) == 1
    assert registry.get_sample_value(count, {"job": "child"}) == 1
    # Both exited: their live leases (one each) are forgotten at the scrape.
    assert registry.get_sample_value("relay_live_leases") in (None, 0.0)
    left = os.listdir(env["PROMETHEUS_MULTIPROC_DIR"])
    assert {f"gauge_livesum_{parent}.db", f"gauge_livesum_{child}.db"}.isdisjoint(left)

"""examples/fastapi_app.py under uvicorn: two real servers race on one store, each slot once,
and the web console the app mounts answers under /relay/.

Both serve the scheduler from the app's lifespan (``async with scheduler``) with a job every
second. The first is stopped with SIGTERM while the second keeps going, then the second; both
shut down cleanly (lifespan complete, no error logged), and each report is written once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from relay import RunState, open_backend
from tests.support.ports import free_port
from tests.support.procs import ROOT


def serve(port: int, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "uvicorn", "examples.fastapi_app:app"]
    with log.open("wb") as out:
        return subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            env={**os.environ, **env, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'shared'}"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def answer(port: int, proc: subprocess.Popen[bytes], log: Path) -> dict[str, Any]:
    """The app's status page, once it answers (the lifespan has started by then)."""
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                body: dict[str, Any] = json.load(response)
                return body
        except OSError:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)


def console_page(port: int) -> str:
    """The web console's jobs page, as the app serves it under /relay/."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/relay/", timeout=10) as response:
        assert response.status == 200
        page: str = response.read().decode()
        return page


def reports(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def wait_for_reports(path: Path, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(reports(path)) < count:
        assert time.monotonic() < deadline, f"only {len(reports(path))} reports"
        time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes], log: Path) -> str:
    """SIGTERM, then the exit code and the log of a clean shutdown.

    uvicorn (0.29 and later) raises the signal again once it has shut down, so a clean stop
    ends with -SIGTERM, after "Finished server process".
    """
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"did not stop on SIGTERM:\n{log.read_text()}") from None
    text = log.read_text()
    assert code in (0, -signal.SIGTERM), text
    assert "Application shutdown complete" in text and "Finished server process" in text, text
    assert "Traceback" not in text and "ERROR" not in text, text
    return text


@pytest.mark.slow
def test_two_uvicorn_servers_write_each_report_once_and_stop_cleanly(tmp_path: Path) -> None:
    db, out = tmp_path / "relay.db", tmp_path / "reports.jsonl"
    env = {"RELAY_DB": str(db), "REPORTS": str(out), "REPORT_EVERY": "1"}
    ports, logs = [free_port(), free_port()], [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [serve(ports[i], env, logs[i]) for i in (0, 1)]
    try:
        owners = [answer(ports[i], procs[i], logs[i])["owner"] for i in (0, 1)]
        assert owners[0] != owners[1]
        wait_for_reports(out, 4)  # both race for these slots
        console = console_page(ports[0])  # the app mounts the web console at /relay/
        assert 'data-job="write_report"' in console and 'href="/relay/runs"' in console
        stop(procs[0], logs[0])
        handed_over = len(reports(out))
        wait_for_reports(out, handed_over + 3)  # the second goes on alone
        stop(procs[1], logs[1])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    written = reports(out)
    twice = [run for run, n in Counter(r["run"] for r in written).items() if n > 1]
    assert not twice, f"written more than once: {twice}"
    assert {r["pid"] for r in written[handed_over:]} == {procs[1].pid}
    store = open_backend(f"sqlite:///{db}")
    try:
        assert store.capability == "lease"
        succeeded = {r.id for r in store.runs(None, limit=1000) if r.state is RunState.SUCCEEDED}
    finally:
        store.close()
    assert succeeded == {r["run"] for r in written}  # each report is one recorded run

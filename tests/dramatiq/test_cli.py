"""``relay-dramatiq`` (``python -m relay_dramatiq``): errors name the problem, SIGTERM exits 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.dramatiq.procs import ROOT

NO_PERIODIC = """
import dramatiq
from dramatiq.brokers.stub import StubBroker
dramatiq.set_broker(StubBroker())

@dramatiq.actor
def plain() -> None: ...
"""

STUB_APP = """
import dramatiq
from dramatiq.brokers.stub import StubBroker
import relay_dramatiq

broker = StubBroker()
broker.add_middleware(relay_dramatiq.RelayMiddleware("sqlite:///{db}"))
dramatiq.set_broker(broker)

@relay_dramatiq.periodic(every=60)
@dramatiq.actor
def minutely() -> None: ...
"""


def cli(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}
    return subprocess.Popen(
        [sys.executable, "-m", "relay_dramatiq", *args],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def test_an_unknown_module_is_reported(tmp_path: Path) -> None:
    proc = cli(tmp_path, "no_such_module")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "cannot import 'no_such_module'" in out, out


def test_a_module_without_periodic_actors_is_reported(tmp_path: Path) -> None:
    (tmp_path / "plain_app.py").write_text(NO_PERIODIC)
    proc = cli(tmp_path, "plain_app")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "no periodic actors" in out, out


def test_sigterm_stops_the_scheduler_cleanly(tmp_path: Path) -> None:
    (tmp_path / "stub_app.py").write_text(STUB_APP.format(db=tmp_path / "relay.db"))
    proc = cli(tmp_path, "stub_app", "--tick", "0.1")
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while "deciding 1 periodic actor" not in proc.stdout.readline():
        assert time.monotonic() < deadline and proc.poll() is None, "scheduler did not start"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "received SIGTERM, stopping" in out

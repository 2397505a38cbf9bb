"""``relay_dramatiq.django.RelayMiddleware``: built from ``settings.RELAY`` with no arguments, as
django_dramatiq instantiates the classes named in ``DRAMATIQ_BROKER["MIDDLEWARE"]``.

Each case runs in a fresh interpreter: Django's settings can be configured once per process.
``RELAY["SCHEDULABLE_TASKS"]`` names the actors stored schedules may run: a real scheduler and
worker run a stored schedule of one so named, and an unknown name stops ``relay-dramatiq``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from relay import Control
from tests.dramatiq.procs import ROOT, Deployment
from tests.dramatiq.test_cli import cli
from tests.dramatiq.test_processes import combos, deploy

__all__ = ["deploy"]  # the fixture, shared with tests/dramatiq/test_processes.py

SCRIPT = """
import json, sys
from django.conf import settings
settings.configure(RELAY=json.loads(sys.argv[1]))
from relay.errors import RelayError
from relay_dramatiq.django import RelayMiddleware
try:
    m = RelayMiddleware()
except RelayError as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
else:
    print(json.dumps({"backend": m.backend.capability, "lease": m.lease,
                      "heartbeat": m.heartbeat, "queue_lease": m.queue_lease, "tick": m.tick}))
"""


def middleware_from(relay: dict[str, object]) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(relay)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    value: dict[str, object] = json.loads(result.stdout)
    return value


def test_settings_relay_configures_the_middleware(tmp_path: Path) -> None:
    relay = {"BACKEND": f"sqlite:///{tmp_path}/r.db", "LEASE": 20, "QUEUE_LEASE": 600, "TICK": 2}
    assert middleware_from(relay) == {
        "backend": "lease", "lease": 20.0, "heartbeat": 20 / 3, "queue_lease": 600.0, "tick": 2.0,
    }  # fmt: skip


def test_lease_settings_on_a_claim_backend_are_refused(tmp_path: Path) -> None:
    relay = {"BACKEND": f"sqlite:///{tmp_path}/c.db?strategy=claim", "QUEUE_LEASE": 600}
    result = middleware_from(relay)
    assert result["error"] == "UnsupportedOption" and "queue_lease" in str(result["message"])


def test_schedulable_tasks_on_a_claim_backend_are_refused(tmp_path: Path) -> None:
    relay = {"BACKEND": f"sqlite:///{tmp_path}/c.db?strategy=claim", "SCHEDULABLE_TASKS": ["a"]}
    result = middleware_from(relay)
    assert result["error"] == "UnsupportedOption" and "schedulable" in str(result["message"])


def test_schedulable_tasks_that_are_not_a_list_of_names_are_refused(tmp_path: Path) -> None:
    result = middleware_from({"BACKEND": f"sqlite:///{tmp_path}/r.db", "SCHEDULABLE_TASKS": "a"})
    assert result["error"] == "ConfigurationError"
    assert "RELAY['SCHEDULABLE_TASKS'] must be a list of task names" in str(result["message"])


UNKNOWN_APP = """
import dramatiq
from django.conf import settings
from dramatiq.brokers.stub import StubBroker

settings.configure(RELAY={{"BACKEND": "sqlite:///{db}", "SCHEDULABLE_TASKS": ["report", "nope"]}})
from relay_dramatiq.django import RelayMiddleware

broker = StubBroker()
broker.add_middleware(RelayMiddleware())
dramatiq.set_broker(broker)

@dramatiq.actor
def report(n: int) -> None: ...
"""


def test_relay_dramatiq_refuses_to_start_on_an_unknown_schedulable_task(tmp_path: Path) -> None:
    (tmp_path / "unknown_app.py").write_text(UNKNOWN_APP.format(db=tmp_path / "relay.db"))
    proc = cli(tmp_path, "unknown_app")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0, out
    assert "RELAY['SCHEDULABLE_TASKS'] names actor 'nope', but the broker has no actor" in out
    assert "or remove it from the list" in out


@pytest.mark.slow
@pytest.mark.parametrize("deploy", combos(["redis"]), indirect=True)
def test_schedulable_tasks_let_stored_schedules_run_actors_by_name(deploy: Any) -> None:
    d: Deployment = deploy({})
    d.app = "tests.dramatiq.django_app"
    d.worker("worker")
    d.scheduler("scheduler")
    with Control(d.backend) as control:
        d.wait_for(
            "the scheduler to allow named (RELAY['SCHEDULABLE_TASKS'])",
            lambda: any("named" in tasks for tasks in control.allowed_tasks().values()),
        )
        added = control.add_schedule("by_setting", "named", every=1, args=[3], kwargs={"word": "w"})
        d.wait_for("2 runs of the stored schedule", lambda: len(d.events("stored")) >= 2)
        control.remove_schedule("by_setting", version=added.version)
    found = d.events("stored")
    assert {e["run"].partition("@")[0] for e in found} == {"by_setting"}
    assert all(e["args"] == [3, "w"] and e["version"] == added.version for e in found), found

"""The public surface is what the docs promise, and every public name says what it is."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest

import relay
import relay.errors as errors

PROMISED = {
    "Scheduler", "Run", "RunRecord", "RunState", "Job", "run_id", "current_run", "open_backend",
    "ClaimBackend", "LeaseBackend", "AcquireRequest", "AcquireResult", "Outcome",
    "RelayError", "ConfigurationError", "InvalidSchedule", "UnknownBackend", "UnsupportedOption",
    "MissingDependency", "BackendError", "BackendUnavailable", "LeaseLost", "__version__",
    "Control", "JobInfo", "JobStatus", "Schedule", "ScheduleChange", "Conflict",
    "UnknownSchedule", "InvalidArgument",
}  # fmt: skip


def test_all_is_what_the_docs_promise() -> None:
    assert set(relay.__all__) == PROMISED
    for name in relay.__all__:
        assert hasattr(relay, name), name


@pytest.mark.parametrize(
    "module",
    ["relay", "relay.contract", "relay.errors", "relay.fencing", "relay.jobs", "relay.runs",
     "relay.schedules", "relay.settings", "relay.engine", "relay.scheduler", "relay.backends",
     "relay.retries", "relay.control", "relay.lease_rules", "relay.upcoming", "relay.testing",
     "relay.testing.plugin", "relay.clock", "relay.deadlines", "relay.doctor",
     "relay.doctor_rules", "relay.stored", "relay.schedule_store", "relay.control_schedules",
     "relay.engine.stored", "relay.migrate", "relay.instances", "relay.health", "relay.tracing",
     "relay.layout", "relay.arguments"],
)  # fmt: skip
def test_every_public_name_has_a_docstring(module: str) -> None:
    loaded = importlib.import_module(module)
    assert loaded.__doc__
    for name in getattr(loaded, "__all__", []):
        value = getattr(loaded, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__doc__, f"{module}.{name} has no docstring"


def test_errors_form_one_tree() -> None:
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.RelayError)
    assert issubclass(errors.UnsupportedOption, errors.ConfigurationError)
    assert issubclass(errors.LeaseLost, errors.BackendError)
    assert issubclass(errors.BackendUnavailable, errors.BackendError)


def test_importing_relay_imports_no_driver_or_host() -> None:
    """The core imports drivers only when a backend needs them, and never Celery or Dramatiq."""
    code = (
        "import sys, relay, relay.scheduler, relay.cli\n"
        "heavy = {'redis', 'psycopg', 'pika', 'nats', 'celery', 'dramatiq', 'django'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]"


def test_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pika", None)  # as if pika were not installed
    with pytest.raises(
        errors.MissingDependency, match=r"pip install 'relay-scheduler\[rabbitmq\]'"
    ):
        relay.open_backend("amqp://guest:guest@127.0.0.1:5672/")

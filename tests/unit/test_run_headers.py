"""relay.runs' run header: a stored schedule's run carries its version to the worker; a code
job's header is unchanged."""

from __future__ import annotations

from datetime import UTC, datetime

from relay.runs import Run, format_slot, run_from_headers, run_to_headers
from relay.tracing import read_message

SLOT = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def a_run(version: int | None = None) -> Run:
    run_id = f"nightly@{format_slot(SLOT)}"
    return Run(run_id, "nightly", SLOT, 2, 7, "beat@host", schedule_version=version)


def test_a_code_jobs_header_has_no_schedule_version() -> None:
    header = run_to_headers(a_run(), max_attempts=3)
    assert set(header) == {"id", "token", "attempt", "owner", "max_attempts"}
    assert run_from_headers(header) == a_run()


def test_a_stored_schedules_run_carries_its_version_to_the_worker() -> None:
    header = run_to_headers(a_run(4), max_attempts=3)
    assert header["schedule_version"] == 4
    message = read_message(header)  # where a Celery worker or Dramatiq middleware reads it
    assert message is not None and message.max_attempts == 3
    assert message.run == a_run(4)
    assert message.run.schedule_version == 4


def test_a_malformed_schedule_version_makes_the_header_malformed() -> None:
    header = {**run_to_headers(a_run()), "schedule_version": "four"}
    assert run_from_headers(header) is None

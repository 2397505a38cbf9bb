"""A run of a stored schedule keeps, on its record, the schedule version it was first leased with.

Issue 24, "No retroactive fire": a run already leased finishes with the definition it was leased
with, and its record keeps the version it ran. Every lease backend, through the protocol alone.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from relay import AcquireRequest, LeaseBackend, Outcome, Run, RunState
from tests.support.waiting import lease_ran_out

UTC = timezone.utc
JOB = "versioned-job"
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=30)
SHORT = 3.0


def req(
    index: int, owner: str, version: int | None, lease: float = 30, **options: object
) -> AcquireRequest:
    return AcquireRequest(
        job=JOB, slot=BASE + timedelta(minutes=index), owner=owner, lease=lease,
        schedule_version=version, **options,  # type: ignore[arg-type]
    )  # fmt: skip


def won(backend: LeaseBackend, request: AcquireRequest) -> Run:
    result = backend.acquire(request)
    assert result.outcome is Outcome.WON and result.run is not None, result
    return result.run


def version_of(backend: LeaseBackend, run_id: str) -> int | None:
    (record,) = [r for r in backend.runs(JOB, limit=100) if r.id == run_id]
    return record.schedule_version


def test_the_version_is_stored_when_the_record_is_created(lease_backend: LeaseBackend) -> None:
    first = won(lease_backend, req(0, "a", 1))
    code = won(lease_backend, req(1, "a", None))
    many, none = [r.run for r in lease_backend.acquire_many([req(2, "a", 4), req(3, "a", None)])]
    assert first.schedule_version == 1 and code.schedule_version is None
    assert many is not None and many.schedule_version == 4
    assert none is not None and none.schedule_version is None
    assert version_of(lease_backend, first.id) == 1
    assert version_of(lease_backend, code.id) is None
    assert version_of(lease_backend, many.id) == 4
    assert lease_backend.start(first.id, first.token, "a", 30).schedule_version == 1


def test_a_takeover_keeps_the_first_version(lease_backend: LeaseBackend) -> None:
    dead = won(lease_backend, req(0, "a", 1, lease=SHORT, max_attempts=3))
    lease_ran_out(lease_backend, dead.id)
    (record,) = [r for r in lease_backend.reclaimable() if r.id == dead.id]
    assert record.schedule_version == 1
    taken, other = [
        r.run
        for r in lease_backend.acquire_many(
            [req(0, "b", 2, max_attempts=3), req(1, "b", 2, max_attempts=3)]
        )
    ]
    assert taken is not None and taken.attempt == 2 and taken.schedule_version == 1
    assert other is not None and other.schedule_version == 2
    assert version_of(lease_backend, dead.id) == 1


def test_a_retry_and_a_hand_over_keep_the_first_version(lease_backend: LeaseBackend) -> None:
    first = won(lease_backend, req(0, "a", 3, max_attempts=3))
    assert lease_backend.finish(first.id, first.token, succeeded=False) is RunState.PENDING
    (record,) = [r for r in lease_backend.reclaimable() if r.id == first.id]
    assert record.schedule_version == 3
    retry = won(lease_backend, req(0, "b", 5, max_attempts=3))
    assert retry.attempt == 2 and retry.schedule_version == 3
    lease_backend.release(retry.id, retry.token)
    again = won(lease_backend, req(0, "c", None, max_attempts=3))
    assert again.schedule_version == 3
    assert lease_backend.finish(again.id, again.token, succeeded=True) is RunState.SUCCEEDED
    assert version_of(lease_backend, first.id) == 3


def test_a_run_created_without_a_version_takes_the_version_of_its_first_lease(
    lease_backend: LeaseBackend,
) -> None:
    # A triggered run is created pending by an operator, who names no version: its first lease
    # records the version that ran it, and later leases keep that one.
    manual = lease_backend.trigger(JOB)
    assert manual.schedule_version is None
    request = AcquireRequest(
        job=JOB, slot=manual.scheduled_for, owner="a", lease=30, manual=True,
        schedule_version=7, max_attempts=2,
    )  # fmt: skip
    run = won(lease_backend, request)
    assert run.id == manual.id and run.schedule_version == 7
    lease_backend.release(run.id, run.token)
    assert won(lease_backend, replace(request, schedule_version=8)).schedule_version == 7
    assert version_of(lease_backend, manual.id) == 7

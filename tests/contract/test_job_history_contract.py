"""The reads and the mark behind overdue jobs (:mod:`relay.overdue`), on every lease backend.

``job_history`` (:class:`relay.contract.ReadsHistory`) gives each job's newest slot runs and its
latest success in one call, and agrees with what ``runs`` reads one job at a time; ``mark_once``
(:class:`relay.contract.MarksOnce`) answers ``True`` to one caller per key.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from relay import AcquireRequest, LeaseBackend, Outcome
from relay.contract import MarksOnce, ReadsHistory, marks_once, reads_history
from relay.overdue import read_health

UTC = timezone.utc
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=3)


def history_of(backend: LeaseBackend) -> ReadsHistory:
    if not reads_history(backend):
        pytest.skip(f"{backend.name} reads one job's runs per call (no job_history)")
    return backend


def marker(backend: LeaseBackend) -> MarksOnce:
    if not marks_once(backend):
        pytest.skip(f"{backend.name} keeps no marks (no mark_once)")
    return backend


def ended(backend: LeaseBackend, job: str, minute: int, succeeded: bool) -> None:
    slot = BASE + timedelta(minutes=minute)
    won = backend.acquire(AcquireRequest(job=job, slot=slot, owner="a", lease=60, max_attempts=1))
    assert won.outcome is Outcome.WON and won.run is not None
    backend.start(won.run.id, won.run.token, "a", 60)
    backend.finish(won.run.id, won.run.token, succeeded=succeeded)


def populate(backend: LeaseBackend) -> None:
    backend.register_jobs(
        {
            "history-a": '{"every": 60, "schedule": "every 60s"}',
            "history-b": '{"every": 60, "schedule": "every 60s", "alert_after_failures": 2}',
            "history-c": '{"every": 60, "schedule": "every 60s"}',
        }
    )
    ended(backend, "history-a", 0, True)
    ended(backend, "history-a", 1, True)
    ended(backend, "history-a", 2, False)
    backend.skip("history-a", BASE + timedelta(minutes=3), "missed")
    backend.acquire(
        AcquireRequest(job="history-a", slot=BASE + timedelta(minutes=4), owner="a", lease=60)
    )
    ended(backend, "history-b", 0, False)
    ended(backend, "history-b", 1, False)


def test_one_call_reads_each_jobs_newest_runs_and_latest_success(
    lease_backend: LeaseBackend,
) -> None:
    backend = history_of(lease_backend)
    populate(backend)

    found = backend.job_history(["history-a", "history-b", "history-c"], 3)

    a, b, c = found["history-a"], found["history-b"], found["history-c"]
    assert [r.scheduled_for for r in a.recent] == [BASE + timedelta(minutes=m) for m in (4, 3, 2)]
    assert [r.state.value for r in a.recent] == ["running", "skipped", "failed"]
    assert a.last_success is not None
    assert (a.last_success.scheduled_for, a.last_success.state.value) == (
        BASE + timedelta(minutes=1), "succeeded",
    )  # fmt: skip
    assert [r.state.value for r in b.recent] == ["failed", "failed"]
    assert b.last_success is None
    assert (c.recent, c.last_success) == ((), None)


def test_a_manual_success_counts_as_the_latest_success(lease_backend: LeaseBackend) -> None:
    backend = history_of(lease_backend)
    populate(backend)
    manual = backend.trigger("history-b")
    won = backend.acquire(
        AcquireRequest(job="history-b", slot=manual.scheduled_for, owner="a", lease=60, manual=True)
    )
    assert won.run is not None
    backend.start(won.run.id, won.run.token, "a", 60)
    backend.finish(won.run.id, won.run.token, succeeded=True)

    found = backend.job_history(["history-b"], 5)["history-b"]

    assert found.last_success is not None and found.last_success.id == manual.id
    assert all("manual" not in r.id for r in found.recent)


class OneJobAtATime:
    """The lease store seen without its batch read: what ``read_health`` falls back to."""

    def __init__(self, backend: LeaseBackend) -> None:
        self._backend = backend

    def __getattr__(self, name: str) -> object:
        if name in ("job_history", "schedule_changes"):
            raise AttributeError(name)
        return getattr(self._backend, name)


def test_the_batch_read_decides_as_runs_one_job_at_a_time(lease_backend: LeaseBackend) -> None:
    populate(lease_backend)

    batched = read_health(lease_backend)
    single = read_health(OneJobAtATime(lease_backend))  # type: ignore[arg-type]

    assert [h.to_json() | {"now": None} for h in batched] == [
        h.to_json() | {"now": None} for h in single
    ]
    states = {h.job: h for h in batched}
    assert states["history-a"].state == "overdue"
    assert (states["history-a"].slot, states["history-a"].outcome) == (
        BASE + timedelta(minutes=2), "failed",
    )  # fmt: skip
    assert states["history-b"].failing and states["history-b"].failures >= 2
    assert states["history-c"].state == "waiting"


def test_a_mark_is_first_once_per_key_until_it_expires(lease_backend: LeaseBackend) -> None:
    backend = marker(lease_backend)

    assert backend.mark_once("job|job_overdue|2026-01-01T00:00:00Z", 0.5)
    assert not backend.mark_once("job|job_overdue|2026-01-01T00:00:00Z", 0.5)
    assert backend.mark_once("job|job_failing|2026-01-01T00:00:00Z", 60)
    deadline = time.monotonic() + 10
    while not backend.mark_once("job|job_overdue|2026-01-01T00:00:00Z", 60):
        assert time.monotonic() < deadline, "an expired mark was never free again"
        time.sleep(0.1)
    assert not backend.mark_once("job|job_failing|2026-01-01T00:00:00Z", 60)

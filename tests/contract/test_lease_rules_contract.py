"""One truth table of the lease rules, held against every lease backend through both paths.

Each rule (``relay.lease_rules.decide``, the PL/pgSQL functions, the Lua script) is a row: a setup,
a request, the outcome, and the run's record afterwards. Every row runs on every lease backend, by
``acquire`` and by ``acquire_many`` (with another job's request in the batch), on a job of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from relay import AcquireRequest, LeaseBackend, Outcome, Run

UTC = timezone.utc
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=30)
Setup = Callable[[LeaseBackend, str], Any]


def _slot(minute: int) -> datetime:
    return BASE + timedelta(minutes=minute)


def _lease(backend: LeaseBackend, job: str, minute: int = 0, **options: Any) -> Run:
    options.setdefault("lease", 30)
    result = backend.acquire(AcquireRequest(job, _slot(minute), "setup", **options))
    assert result.run is not None, result
    return result.run


def _failed(backend: LeaseBackend, job: str) -> None:
    run = _lease(backend, job, max_attempts=3)
    backend.finish(run.id, run.token, succeeded=False, error="boom")


def _released(backend: LeaseBackend, job: str) -> None:
    run = _lease(backend, job, max_attempts=1)
    backend.start(run.id, run.token, "a", 30)
    backend.release(run.id, run.token)


def _released_unstarted(backend: LeaseBackend, job: str) -> None:
    run = _lease(backend, job, max_attempts=1)
    backend.release(run.id, run.token)  # never started: its attempt is given back


def _succeeded(backend: LeaseBackend, job: str) -> None:
    run = _lease(backend, job)
    backend.finish(run.id, run.token, succeeded=True)


def _paused(backend: LeaseBackend, job: str) -> None:
    backend.pause(job, "maintenance", "ops")


def _paused_then_leased(backend: LeaseBackend, job: str) -> None:
    _lease(backend, job)
    backend.pause(job, "maintenance", "ops")


def _resumed(backend: LeaseBackend, job: str) -> None:
    backend.pause(job, "maintenance", "ops")
    assert backend.acquire(AcquireRequest(job, _slot(0), "setup", 30)).outcome is Outcome.PAUSED
    assert backend.resume(job, catch_up=3600) == [f"{job}@{_iso(0)}"]


def _backfilled(backend: LeaseBackend, job: str) -> None:
    assert backend.backfill(job, [_slot(0)]) == [True]


def _live_and_waiting(backend: LeaseBackend, job: str) -> None:
    _lease(backend, job, 1)
    result = backend.acquire(AcquireRequest(job, _slot(2), "setup", 30, buffer_one=True))
    assert result.outcome is Outcome.BUFFERED


def _buffered(backend: LeaseBackend, job: str) -> None:
    _lease(backend, job, 1)
    result = backend.acquire(AcquireRequest(job, _slot(0), "setup", 30, buffer_one=True))
    assert result.outcome is Outcome.BUFFERED


def _buffered_then_free(backend: LeaseBackend, job: str) -> None:
    live = _lease(backend, job, 1)
    result = backend.acquire(AcquireRequest(job, _slot(0), "setup", 30, buffer_one=True))
    assert result.outcome is Outcome.BUFFERED
    backend.finish(live.id, live.token, succeeded=True)


def _iso(minute: int) -> str:
    return _slot(minute).strftime("%Y-%m-%dT%H:%M:%SZ")


# name: (setup, request options, outcome, (state, attempt, failures, reason) afterwards)
RULES: dict[str, tuple[Setup | None, dict[str, Any], Outcome, tuple[Any, ...]]] = {
    "fresh": (None, {}, Outcome.WON, ("running", 1, 0, None)),
    "stale": (None, {"stale_after": 60}, Outcome.STALE, ("skipped", 0, 0, "stale")),
    "overlap": (
        lambda b, job: _lease(b, job, 1),
        {"overlap_skip": True}, Outcome.OVERLAP, ("skipped", 0, 0, "overlap"),
    ),
    "overlap-expired": (
        lambda b, job: _lease(b, job, 1, lease=0.2),
        {"overlap_skip": True}, Outcome.WON, ("running", 1, 0, None),
    ),
    "held": (lambda b, job: _lease(b, job), {}, Outcome.HELD, ("running", 1, 0, None)),
    "expired-retry": (
        lambda b, job: _lease(b, job, lease=0.2, max_attempts=2),
        {}, Outcome.WON, ("running", 2, 1, None),
    ),
    "expired-exhausted": (
        lambda b, job: _lease(b, job, lease=0.2, max_attempts=1),
        {"max_attempts": 5}, Outcome.EXHAUSTED, ("failed", 1, 1, "max_attempts"),
    ),
    "failed-retry": (_failed, {}, Outcome.WON, ("running", 2, 1, None)),
    "released": (_released, {}, Outcome.WON, ("running", 2, 0, None)),
    "released-unstarted": (_released_unstarted, {}, Outcome.WON, ("running", 1, 0, None)),
    "succeeded": (_succeeded, {}, Outcome.FINISHED, ("succeeded", 1, 0, None)),
    "skipped": (
        lambda b, job: b.skip(job, _slot(0), "missed"),
        {}, Outcome.FINISHED, ("skipped", 0, 0, "missed"),
    ),
    # pause: a paused job's new runs are skipped; what is recorded goes on.
    "paused": (_paused, {}, Outcome.PAUSED, ("skipped", 0, 0, "paused")),
    "paused-stale": (_paused, {"stale_after": 60}, Outcome.STALE, ("skipped", 0, 0, "stale")),
    "paused-held": (_paused_then_leased, {}, Outcome.HELD, ("running", 1, 0, None)),
    # resume with catch-up, backfill: a pending run never leased takes the request's attempts.
    "resumed": (_resumed, {"max_attempts": 2}, Outcome.WON, ("running", 1, 0, None)),
    "backfilled": (_backfilled, {"max_attempts": 2}, Outcome.WON, ("running", 1, 0, None)),
    # buffer_one: one run waits for the live one, later ones are skipped.
    "buffer-one": (
        lambda b, job: _lease(b, job, 1),
        {"buffer_one": True}, Outcome.BUFFERED, ("pending", 0, 0, "buffered"),
    ),
    "buffer-one-full": (
        _live_and_waiting, {"buffer_one": True}, Outcome.OVERLAP, ("skipped", 0, 0, "overlap"),
    ),
    "buffer-one-free": (
        None, {"buffer_one": True}, Outcome.WON, ("running", 1, 0, None),
    ),
    "buffered-waits": (_buffered, {}, Outcome.BUFFERED, ("pending", 0, 0, "buffered")),
    "buffered-starts": (_buffered_then_free, {}, Outcome.WON, ("running", 1, 0, None)),
}  # fmt: skip


def test_every_rule_holds_through_acquire_and_acquire_many(lease_backend: LeaseBackend) -> None:
    for name, (setup, _, _, _) in RULES.items():
        for path in ("one", "many"):
            if setup is not None:
                setup(lease_backend, f"{name}-{path}")
    time.sleep(1.0)  # the 0.2 s leases expire on the store's clock
    for name, (_, options, outcome, after) in RULES.items():
        request = {"owner": "decider", "lease": 30, **options}
        one = lease_backend.acquire(AcquireRequest(f"{name}-one", _slot(0), **request))
        many = lease_backend.acquire_many(
            [
                AcquireRequest(f"{name}-many", _slot(0), **request),
                AcquireRequest(f"filler-{name}", _slot(0), "decider", 30),
            ]
        )[0]
        assert (one.outcome, many.outcome) == (outcome, outcome), name
        for path in ("one", "many"):
            (record,) = [
                r for r in lease_backend.runs(f"{name}-{path}") if r.scheduled_for == _slot(0)
            ]
            state = (record.state.value, record.attempt, record.failures, record.reason)
            assert state == after, (name, path)


@pytest.mark.parametrize("path", ["one", "many"])
def test_manual_and_pruned_runs_follow_the_same_rules(
    lease_backend: LeaseBackend, path: str
) -> None:
    job = f"manual-{path}"

    def acquire(request: AcquireRequest) -> Outcome:
        if path == "one":
            return lease_backend.acquire(request).outcome
        filler = AcquireRequest(f"filler-{job}", _slot(0), "decider", 30)
        return lease_backend.acquire_many([request, filler])[0].outcome

    # manual: pending until leased, then held, fenced and finished like a slot's run.
    triggered = lease_backend.trigger(job)
    manual = AcquireRequest(job, triggered.scheduled_for, "decider", 30, manual=True)
    assert acquire(manual) is Outcome.WON
    assert acquire(manual) is Outcome.HELD
    (record,) = [r for r in lease_backend.runs(job) if r.id == triggered.id]
    lease_backend.finish(record.id, record.token, succeeded=True)
    assert acquire(manual) is Outcome.FINISHED
    # pruned: a finished run past retention is forgotten, but never the job's latest slot.
    for minute in (0, 1):
        run = _lease(lease_backend, job, minute)
        lease_backend.finish(run.id, run.token, succeeded=True)
    time.sleep(0.3)
    while lease_backend.prune(0.1) > 0:
        pass
    assert [
        r.scheduled_for for r in lease_backend.runs(job) if not r.id.startswith(f"{job}@m")
    ] == [_slot(1)]
    assert lease_backend.last_slot(job) == _slot(1)
    assert acquire(AcquireRequest(job, _slot(1), "decider", 30)) is Outcome.FINISHED

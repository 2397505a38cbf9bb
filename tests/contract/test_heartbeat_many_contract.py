"""The optional batch heartbeat (:class:`relay.contract.BatchHeartbeat`): every lease backend that
has ``heartbeat_many`` renews each run as ``heartbeat`` would, in one call, and reports a lost run
per run."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from relay import AcquireRequest, LeaseBackend, LeaseLost, Outcome, Run
from relay.contract import BatchHeartbeat, renews_many
from tests.support.waiting import lease_ran_out

UTC = timezone.utc
JOB = "batch-heartbeat-job"
OTHER = "batch-heartbeat-other"
SHORT = 3.0
"""The first lease, seconds: long enough that a loaded machine does not lose it before the
batch renews it."""
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=30)


def batch(backend: LeaseBackend) -> BatchHeartbeat:
    if not renews_many(backend):
        pytest.skip(f"{backend.name} renews one run per call (no heartbeat_many)")
    return backend


def lease(backend: LeaseBackend, job: str, index: int, owner: str = "a") -> Run:
    slot = BASE + timedelta(minutes=index)
    result = backend.acquire(AcquireRequest(job=job, slot=slot, owner=owner, lease=SHORT))
    assert result.outcome is Outcome.WON, result
    assert result.run is not None
    return result.run


def test_one_call_renews_every_run_and_reports_only_the_stale_one(
    lease_backend: LeaseBackend,
) -> None:
    backend = batch(lease_backend)
    first, second, other = lease(backend, JOB, 0), lease(backend, JOB, 1), lease(backend, OTHER, 0)
    backend.release(second.id, second.token)  # handed over, then leased by b: a newer token
    taken = lease(backend, JOB, 1, owner="b")
    assert taken.token > second.token

    lost = backend.heartbeat_many(
        [(first.id, first.token), (second.id, second.token), (other.id, other.token)], 60
    )

    assert lost[0] is None and lost[2] is None
    assert isinstance(lost[1], LeaseLost)
    with pytest.raises(LeaseLost) as single:
        backend.heartbeat(second.id, second.token, 60)
    assert str(lost[1]) == str(single.value)  # the same words as one heartbeat's
    lease_ran_out(backend, taken.id)  # the first leases (SHORT) have run out by now
    for run in (first, other):
        slot = run.scheduled_for
        again = backend.acquire(AcquireRequest(job=run.job, slot=slot, owner="b", lease=SHORT))
        assert again.outcome is Outcome.HELD, run.id  # renewed for a minute by the batch
    backend.finish(taken.id, taken.token, succeeded=True)  # the newer lease was left alone
    assert backend.heartbeat_many([(first.id, first.token)], 60) == [None]


def test_no_runs_is_no_call(lease_backend: LeaseBackend) -> None:
    assert batch(lease_backend).heartbeat_many([], 60) == []

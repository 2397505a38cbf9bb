"""The control plane of the lease contract: register and list jobs, pause, resume, trigger,
backfill and prune. Every lease backend passes these through the protocol alone."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from relay import AcquireRequest, LeaseBackend, Outcome, RunState
from relay.runs import is_manual, parse_run_id

UTC = timezone.utc
JOB = "control-job"
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=30)


@pytest.fixture(autouse=True)
def _fresh_base() -> None:
    """Slots counted from this test's start: windows (catch-up) are judged against the store's now,
    and a long suite would otherwise age slots set when the module was imported."""
    global BASE
    BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=30)


def slot(index: int) -> datetime:
    return BASE + timedelta(minutes=index)


def req(index: int, owner: str = "a", **options: object) -> AcquireRequest:
    return AcquireRequest(JOB, slot(index), owner, 30, **options)  # type: ignore[arg-type]


def record(backend: LeaseBackend, run_id: str):  # type: ignore[no-untyped-def]
    (found,) = [r for r in backend.runs(JOB, limit=1000) if r.id == run_id]
    return found


def test_registered_jobs_are_listed_with_their_spec(lease_backend: LeaseBackend) -> None:
    lease_backend.register_jobs({JOB: '{"every": 60}', "other": '{"cron": "* * * * *"}'})
    lease_backend.register_jobs({JOB: '{"every": 30}'})
    jobs = {info.name: info for info in lease_backend.jobs()}
    assert jobs[JOB].spec == '{"every": 30}' and jobs["other"].spec == '{"cron": "* * * * *"}'
    assert not jobs[JOB].paused


def test_pause_records_who_when_and_why_and_skips_new_slots(lease_backend: LeaseBackend) -> None:
    running = lease_backend.acquire(req(0)).run
    assert running is not None
    before = lease_backend.now()
    assert lease_backend.pause(JOB, "db migration", "alice") is True
    assert lease_backend.pause(JOB, "again", "bob") is False  # the first pause's record stays
    (info,) = [i for i in lease_backend.jobs() if i.name == JOB]
    assert (info.paused, info.paused_by, info.paused_reason) == (True, "alice", "db migration")
    assert info.paused_at is not None and abs((info.paused_at - before).total_seconds()) < 5
    assert lease_backend.acquire(req(1)).outcome is Outcome.PAUSED
    assert lease_backend.acquire_many([req(2), req(1, owner="b")])[0].outcome is Outcome.PAUSED
    paused = record(lease_backend, f"{JOB}@{slot(1):%Y-%m-%dT%H:%M:%SZ}")
    assert (paused.state, paused.reason) == (RunState.SKIPPED, "paused")
    # The run that was already going is not touched.
    assert lease_backend.finish(running.id, running.token, succeeded=True) is RunState.SUCCEEDED


def test_resume_runs_nothing_unless_asked_to_catch_up(lease_backend: LeaseBackend) -> None:
    lease_backend.pause(JOB, "", "ops")
    assert [lease_backend.acquire(req(i)).outcome for i in (1, 2)] == [Outcome.PAUSED] * 2
    assert lease_backend.resume(JOB) == []
    assert not next(i for i in lease_backend.jobs() if i.name == JOB).paused
    assert lease_backend.acquire(req(3)).outcome is Outcome.WON
    assert lease_backend.acquire(req(2)).outcome is Outcome.FINISHED  # still skipped (paused)
    assert not [r for r in lease_backend.reclaimable() if r.job == JOB]


def test_resume_with_catch_up_puts_back_the_paused_slots_in_its_window(
    lease_backend: LeaseBackend,
) -> None:
    lease_backend.pause(JOB, "", "ops")
    for index in (0, 20, 25):
        assert lease_backend.acquire(req(index)).outcome is Outcome.PAUSED
    # Slot 0 is 30 minutes old, slots 20 and 25 ten and five: a 15 minute window takes two.
    resumed = lease_backend.resume(JOB, catch_up=15 * 60)
    assert [parse_run_id(i)[1] for i in resumed] == [slot(20), slot(25)]
    assert {r.id for r in lease_backend.reclaimable() if r.job == JOB} == set(resumed)
    assert record(lease_backend, resumed[0]).reason == "resumed"
    won = lease_backend.acquire(req(20, max_attempts=2))
    assert won.outcome is Outcome.WON and won.run is not None and won.run.attempt == 1
    assert lease_backend.acquire(req(0)).outcome is Outcome.FINISHED


def test_trigger_creates_a_manual_run_leased_like_any_other(lease_backend: LeaseBackend) -> None:
    lease_backend.acquire(req(0))
    triggered = lease_backend.trigger(JOB)
    assert is_manual(triggered.id) and triggered.id.startswith(f"{JOB}@manual:")
    assert parse_run_id(triggered.id) == (JOB, triggered.scheduled_for)
    assert (triggered.state, triggered.reason) == (RunState.PENDING, "manual")
    assert abs((triggered.scheduled_for - lease_backend.now()).total_seconds()) < 5
    assert triggered.id in {r.id for r in lease_backend.reclaimable()}
    request = AcquireRequest(JOB, triggered.scheduled_for, "a", 30, max_attempts=2, manual=True)
    won = lease_backend.acquire(request)
    assert won.outcome is Outcome.WON and won.run is not None and won.run.id == triggered.id
    assert lease_backend.acquire_many([request])[0].outcome is Outcome.HELD
    started = lease_backend.start(won.run.id, won.run.token, "worker", 30)
    assert started.id == triggered.id
    assert lease_backend.finish(won.run.id, won.run.token, succeeded=False) is RunState.PENDING
    assert lease_backend.last_slot(JOB) == slot(0)  # a manual run is not a slot


def test_trigger_with_overlap_skip_is_skipped_while_a_run_is_live(
    lease_backend: LeaseBackend,
) -> None:
    lease_backend.acquire(req(0))
    skipped = lease_backend.trigger(JOB, overlap_skip=True)
    assert (skipped.state, skipped.reason) == (RunState.SKIPPED, "overlap")
    assert lease_backend.trigger("idle-job", overlap_skip=True).state is RunState.PENDING


def test_backfill_creates_pending_runs_for_slots_without_a_record(
    lease_backend: LeaseBackend,
) -> None:
    done = lease_backend.acquire(req(1)).run
    assert done is not None
    lease_backend.finish(done.id, done.token, succeeded=True)
    assert lease_backend.backfill(JOB, [slot(0), slot(1), slot(2)]) == [True, False, True]
    assert lease_backend.backfill(JOB, [slot(0)]) == [False]
    pending = sorted(r.scheduled_for for r in lease_backend.reclaimable() if r.job == JOB)
    assert pending == [slot(0), slot(2)]
    assert lease_backend.acquire(req(0)).outcome is Outcome.WON
    assert lease_backend.acquire(req(1)).outcome is Outcome.FINISHED


def test_prune_deletes_old_finished_runs_but_never_live_ones_or_the_latest(
    lease_backend: LeaseBackend,
) -> None:
    for index in range(6):
        run = lease_backend.acquire(req(index)).run
        assert run is not None
        if index not in (2, 3):
            lease_backend.finish(run.id, run.token, succeeded=True)
    lease_backend.release(*_token_of(lease_backend, 3))  # pending
    time.sleep(0.3)
    assert lease_backend.prune(older_than=3600) == 0  # nothing that old
    assert lease_backend.prune(older_than=0.1, limit=1) == 1
    assert lease_backend.prune(older_than=0.1) == 2  # 1 and 4; 5 is the latest slot
    assert lease_backend.prune(older_than=0.1) == 0
    left = {r.scheduled_for: r.state for r in lease_backend.runs(JOB)}
    assert left == {
        slot(2): RunState.RUNNING,
        slot(3): RunState.PENDING,
        slot(5): RunState.SUCCEEDED,
    }
    assert lease_backend.last_slot(JOB) == slot(5)


def _token_of(backend: LeaseBackend, index: int) -> tuple[str, int]:
    (found,) = [r for r in backend.runs(JOB) if r.scheduled_for == slot(index)]
    return found.id, found.token


def test_a_serial_backfill_runs_one_run_at_a_time(lease_backend: LeaseBackend) -> None:
    assert lease_backend.backfill(JOB, [slot(0), slot(1)], serial=True) == [True, True]
    first, second = lease_backend.acquire_many([req(0), req(1)])
    assert first.outcome is Outcome.WON and first.run is not None
    assert second.outcome is Outcome.BUFFERED
    lease_backend.finish(first.run.id, first.run.token, succeeded=True)
    assert lease_backend.acquire(req(1)).outcome is Outcome.WON


def test_resume_with_catch_up_puts_back_every_paused_slot_even_many(
    lease_backend: LeaseBackend,
) -> None:
    lease_backend.pause(JOB, "", "ops")
    seconds = [BASE + timedelta(minutes=20, seconds=s) for s in range(40)]
    requests = [AcquireRequest(JOB, at, "a", 30) for at in seconds]
    assert {r.outcome for r in lease_backend.acquire_many(requests)} == {Outcome.PAUSED}
    resumed = lease_backend.resume(JOB, catch_up=3600)
    assert [parse_run_id(i)[1] for i in resumed] == seconds
    assert {r.outcome for r in lease_backend.acquire_many(requests)} == {Outcome.WON}

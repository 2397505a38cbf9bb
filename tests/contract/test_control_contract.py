"""The control plane of the lease contract: register and list jobs, pause, resume, trigger,
backfill and prune. Every lease backend passes these through the protocol alone."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from relay import AcquireRequest, LeaseBackend, Outcome, RunState, open_backend
from relay.runs import is_manual, parse_run_id

UTC = timezone.utc
JOB = "control-job"
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=30)


@pytest.fixture
def backend(lease_url: str) -> Iterator[LeaseBackend]:
    opened = open_backend(lease_url)
    assert opened.capability == "lease"
    yield opened
    opened.close()


def slot(index: int) -> datetime:
    return BASE + timedelta(minutes=index)


def req(index: int, owner: str = "a", **options: object) -> AcquireRequest:
    return AcquireRequest(JOB, slot(index), owner, 30, **options)  # type: ignore[arg-type]


def record(backend: LeaseBackend, run_id: str):  # type: ignore[no-untyped-def]
    (found,) = [r for r in backend.runs(JOB, limit=1000) if r.id == run_id]
    return found


def test_registered_jobs_are_listed_with_their_spec(backend: LeaseBackend) -> None:
    backend.register_jobs({JOB: '{"every": 60}', "other": '{"cron": "* * * * *"}'})
    backend.register_jobs({JOB: '{"every": 30}'})
    jobs = {info.name: info for info in backend.jobs()}
    assert jobs[JOB].spec == '{"every": 30}' and jobs["other"].spec == '{"cron": "* * * * *"}'
    assert not jobs[JOB].paused


def test_pause_records_who_when_and_why_and_skips_new_slots(backend: LeaseBackend) -> None:
    running = backend.acquire(req(0)).run
    assert running is not None
    before = backend.now()
    assert backend.pause(JOB, "db migration", "alice") is True
    assert backend.pause(JOB, "again", "bob") is False  # the first pause's record stays
    (info,) = [i for i in backend.jobs() if i.name == JOB]
    assert (info.paused, info.paused_by, info.paused_reason) == (True, "alice", "db migration")
    assert info.paused_at is not None and abs((info.paused_at - before).total_seconds()) < 5
    assert backend.acquire(req(1)).outcome is Outcome.PAUSED
    assert backend.acquire_many([req(2), req(1, owner="b")])[0].outcome is Outcome.PAUSED
    paused = record(backend, f"{JOB}@{slot(1):%Y-%m-%dT%H:%M:%SZ}")
    assert (paused.state, paused.reason) == (RunState.SKIPPED, "paused")
    # The run that was already going is not touched.
    assert backend.finish(running.id, running.token, succeeded=True) is RunState.SUCCEEDED


def test_resume_runs_nothing_unless_asked_to_catch_up(backend: LeaseBackend) -> None:
    backend.pause(JOB, "", "ops")
    assert [backend.acquire(req(i)).outcome for i in (1, 2)] == [Outcome.PAUSED] * 2
    assert backend.resume(JOB) == []
    assert not next(i for i in backend.jobs() if i.name == JOB).paused
    assert backend.acquire(req(3)).outcome is Outcome.WON
    assert backend.acquire(req(2)).outcome is Outcome.FINISHED  # still skipped (paused)
    assert not [r for r in backend.reclaimable() if r.job == JOB]


def test_resume_with_catch_up_puts_back_the_paused_slots_in_its_window(
    backend: LeaseBackend,
) -> None:
    backend.pause(JOB, "", "ops")
    for index in (0, 20, 25):
        assert backend.acquire(req(index)).outcome is Outcome.PAUSED
    # Slot 0 is 30 minutes old, slots 20 and 25 ten and five: a 15 minute window takes two.
    resumed = backend.resume(JOB, catch_up=15 * 60)
    assert [parse_run_id(i)[1] for i in resumed] == [slot(20), slot(25)]
    assert {r.id for r in backend.reclaimable() if r.job == JOB} == set(resumed)
    assert record(backend, resumed[0]).reason == "resumed"
    won = backend.acquire(req(20, max_attempts=2))
    assert won.outcome is Outcome.WON and won.run is not None and won.run.attempt == 1
    assert backend.acquire(req(0)).outcome is Outcome.FINISHED


def test_trigger_creates_a_manual_run_leased_like_any_other(backend: LeaseBackend) -> None:
    backend.acquire(req(0))
    triggered = backend.trigger(JOB)
    assert is_manual(triggered.id) and triggered.id.startswith(f"{JOB}@manual:")
    assert parse_run_id(triggered.id) == (JOB, triggered.scheduled_for)
    assert (triggered.state, triggered.reason) == (RunState.PENDING, "manual")
    assert abs((triggered.scheduled_for - backend.now()).total_seconds()) < 5
    assert triggered.id in {r.id for r in backend.reclaimable()}
    request = AcquireRequest(JOB, triggered.scheduled_for, "a", 30, max_attempts=2, manual=True)
    won = backend.acquire(request)
    assert won.outcome is Outcome.WON and won.run is not None and won.run.id == triggered.id
    assert backend.acquire_many([request])[0].outcome is Outcome.HELD
    started = backend.start(won.run.id, won.run.token, "worker", 30)
    assert started.id == triggered.id
    assert backend.finish(won.run.id, won.run.token, succeeded=False) is RunState.PENDING
    assert backend.last_slot(JOB) == slot(0)  # a manual run is not a slot


def test_trigger_with_overlap_skip_is_skipped_while_a_run_is_live(backend: LeaseBackend) -> None:
    backend.acquire(req(0))
    skipped = backend.trigger(JOB, overlap_skip=True)
    assert (skipped.state, skipped.reason) == (RunState.SKIPPED, "overlap")
    assert backend.trigger("idle-job", overlap_skip=True).state is RunState.PENDING


def test_backfill_creates_pending_runs_for_slots_without_a_record(backend: LeaseBackend) -> None:
    done = backend.acquire(req(1)).run
    assert done is not None
    backend.finish(done.id, done.token, succeeded=True)
    assert backend.backfill(JOB, [slot(0), slot(1), slot(2)]) == [True, False, True]
    assert backend.backfill(JOB, [slot(0)]) == [False]
    pending = sorted(r.scheduled_for for r in backend.reclaimable() if r.job == JOB)
    assert pending == [slot(0), slot(2)]
    assert backend.acquire(req(0)).outcome is Outcome.WON
    assert backend.acquire(req(1)).outcome is Outcome.FINISHED


def test_prune_deletes_old_finished_runs_but_never_live_ones_or_the_latest(
    backend: LeaseBackend,
) -> None:
    for index in range(6):
        run = backend.acquire(req(index)).run
        assert run is not None
        if index not in (2, 3):
            backend.finish(run.id, run.token, succeeded=True)
    backend.release(*_token_of(backend, 3))  # pending
    time.sleep(0.3)
    assert backend.prune(older_than=3600) == 0  # nothing that old
    assert backend.prune(older_than=0.1, limit=1) == 1
    assert backend.prune(older_than=0.1) == 2  # 1 and 4; 5 is the latest slot
    assert backend.prune(older_than=0.1) == 0
    left = {r.scheduled_for: r.state for r in backend.runs(JOB)}
    assert left == {
        slot(2): RunState.RUNNING,
        slot(3): RunState.PENDING,
        slot(5): RunState.SUCCEEDED,
    }
    assert backend.last_slot(JOB) == slot(5)


def _token_of(backend: LeaseBackend, index: int) -> tuple[str, int]:
    (found,) = [r for r in backend.runs(JOB) if r.scheduled_for == slot(index)]
    return found.id, found.token


def test_a_serial_backfill_runs_one_run_at_a_time(backend: LeaseBackend) -> None:
    assert backend.backfill(JOB, [slot(0), slot(1)], serial=True) == [True, True]
    first, second = backend.acquire_many([req(0), req(1)])
    assert first.outcome is Outcome.WON and first.run is not None
    assert second.outcome is Outcome.BUFFERED
    backend.finish(first.run.id, first.run.token, succeeded=True)
    assert backend.acquire(req(1)).outcome is Outcome.WON


def test_resume_with_catch_up_puts_back_every_paused_slot_even_many(backend: LeaseBackend) -> None:
    backend.pause(JOB, "", "ops")
    seconds = [BASE + timedelta(minutes=20, seconds=s) for s in range(40)]
    requests = [AcquireRequest(JOB, at, "a", 30) for at in seconds]
    assert {r.outcome for r in backend.acquire_many(requests)} == {Outcome.PAUSED}
    resumed = backend.resume(JOB, catch_up=3600)
    assert [parse_run_id(i)[1] for i in resumed] == seconds
    assert {r.outcome for r in backend.acquire_many(requests)} == {Outcome.WON}

"""The lease contract: every lease backend passes these, unchanged, through the protocol alone.

Short leases and real waits check that the store's clock decides expiry; real processes race and
are killed to check that one atomic step per method holds across processes.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from relay import (
    AcquireRequest,
    LeaseBackend,
    LeaseLost,
    Outcome,
    RunRecord,
    RunState,
    open_backend,
)
from relay.fencing import SQLFence
from relay.health import InstanceInfo
from tests.support import procs
from tests.support.tail_loss import lose_tail
from tests.support.waiting import lease_ran_out, wait_until

UTC = timezone.utc
JOB = "contract-job"


# Fixed once, so that every call in a test names the same runs, whatever minute it is.
# A lease that must still hold at the next step: a loaded two-core machine can stall a
# process for a second, so it is seconds long and the test then waits on the store's clock.
SHORT = 3.0
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=30)


def slot(index: int) -> datetime:
    """Recent slots, a minute apart, so a stale_after of a few hours never applies by accident."""
    return BASE + timedelta(minutes=index)


def req(index: int = 0, owner: str = "a", lease: float = 30, **options: object) -> AcquireRequest:
    return AcquireRequest(job=JOB, slot=slot(index), owner=owner, lease=lease, **options)  # type: ignore[arg-type]


def lease_run(backend: LeaseBackend, index: int = 0, owner: str = "a", **options: object):  # type: ignore[no-untyped-def]
    result = backend.acquire(req(index, owner, **options))
    assert result.outcome is Outcome.WON, result
    assert result.run is not None
    return result.run


def state_of(backend: LeaseBackend, run_id: str) -> RunState:
    (record,) = [r for r in backend.runs(JOB, limit=1000) if r.id == run_id]
    return record.state


# -- one winner, tokens ---------------------------------------------------------------------


def test_first_acquire_wins_and_others_see_it_held(lease_backend: LeaseBackend) -> None:
    run = lease_run(lease_backend, owner="a")
    assert (run.job, run.scheduled_for, run.attempt, run.owner) == (JOB, slot(0), 1, "a")
    assert run.token >= 1
    assert lease_backend.acquire(req(owner="b")).outcome is Outcome.HELD
    assert lease_backend.acquire(req(owner="a")).outcome is Outcome.HELD


def test_tokens_grow_strictly_across_runs_of_a_job(lease_backend: LeaseBackend) -> None:
    tokens = [lease_run(lease_backend, index).token for index in range(5)]
    assert tokens == sorted(tokens) and len(set(tokens)) == 5


def test_acquire_many_decides_each_request_in_order(lease_backend: LeaseBackend) -> None:
    lease_run(lease_backend, 1)
    results = lease_backend.acquire_many([req(0), req(1), req(2)])
    assert [r.outcome for r in results] == [Outcome.WON, Outcome.HELD, Outcome.WON]
    assert results[0].run is not None and results[2].run is not None
    assert results[0].run.token < results[2].run.token


def test_finished_run_is_never_leased_again(lease_backend: LeaseBackend) -> None:
    run = lease_run(lease_backend)
    assert lease_backend.finish(run.id, run.token, succeeded=True) is RunState.SUCCEEDED
    assert lease_backend.acquire(req(owner="b")).outcome is Outcome.FINISHED
    assert state_of(lease_backend, run.id) is RunState.SUCCEEDED


# -- fencing ----------------------------------------------------------------------------------


def test_stale_token_is_refused_and_changes_nothing(lease_backend: LeaseBackend) -> None:
    run = lease_run(lease_backend)
    with pytest.raises(LeaseLost):
        lease_backend.heartbeat(run.id, run.token - 1, 30)
    with pytest.raises(LeaseLost):
        lease_backend.finish(run.id, run.token + 1, succeeded=False)
    with pytest.raises(LeaseLost):
        lease_backend.release(run.id, run.token + 1)
    assert state_of(lease_backend, run.id) is RunState.RUNNING
    assert lease_backend.finish(run.id, run.token, succeeded=True) is RunState.SUCCEEDED


def test_a_finished_run_refuses_every_step_but_the_same_finish_again(
    lease_backend: LeaseBackend,
) -> None:
    run = lease_run(lease_backend)
    lease_backend.finish(run.id, run.token, succeeded=True)
    for operation in (
        lambda: lease_backend.heartbeat(run.id, run.token, 30),
        lambda: lease_backend.release(run.id, run.token),
        lambda: lease_backend.start(run.id, run.token, "a", 30),
        lambda: lease_backend.finish(run.id, run.token - 1, succeeded=True),
        lambda: lease_backend.finish(run.id, run.token + 1, succeeded=False),
    ):
        with pytest.raises(LeaseLost):
            operation()
    assert state_of(lease_backend, run.id) is RunState.SUCCEEDED


def record_of(backend: LeaseBackend, run_id: str) -> RunRecord:
    (record,) = [r for r in backend.runs(JOB, limit=1000) if r.id == run_id]
    return record


@pytest.mark.parametrize(
    ("succeeded", "max_attempts", "state"),
    [(True, 3, RunState.SUCCEEDED), (False, 3, RunState.PENDING), (False, 1, RunState.FAILED)],
)
def test_the_same_finish_again_returns_what_it_recorded_and_changes_nothing(
    lease_backend: LeaseBackend, succeeded: bool, max_attempts: int, state: RunState
) -> None:
    # A finish whose answer was lost, or that too few replicas confirmed, is sent again.
    run = lease_run(lease_backend, max_attempts=max_attempts)
    assert lease_backend.finish(run.id, run.token, succeeded=succeeded, error="e") is state
    before = record_of(lease_backend, run.id)
    for outcome in (succeeded, not succeeded):
        assert lease_backend.finish(run.id, run.token, succeeded=outcome, error="again") is state
    assert record_of(lease_backend, run.id) == before  # a failure is not counted twice
    if state is RunState.PENDING:
        again = lease_run(lease_backend, owner="b", max_attempts=max_attempts)
        assert (again.attempt, record_of(lease_backend, run.id).failures) == (2, 1)
        with pytest.raises(LeaseLost):  # a newer attempt owns the run: the old token is stale
            lease_backend.finish(run.id, run.token, succeeded=False)


def test_a_finish_again_is_refused_after_a_hand_over_or_a_takeover(
    lease_backend: LeaseBackend,
) -> None:
    handed = lease_run(lease_backend, 0)
    lease_backend.release(handed.id, handed.token)
    with pytest.raises(LeaseLost):  # a hand-over is no finish
        lease_backend.finish(handed.id, handed.token, succeeded=True)
    dead = lease_run(lease_backend, 1, lease=0.3, max_attempts=1)
    time.sleep(0.8)
    assert lease_backend.acquire(req(1, owner="b")).outcome is Outcome.EXHAUSTED
    with pytest.raises(LeaseLost):  # recorded failed by an acquire, not by its finish
        lease_backend.finish(dead.id, dead.token, succeeded=True)
    assert state_of(lease_backend, dead.id) is RunState.FAILED


def test_unknown_run_is_refused(lease_backend: LeaseBackend) -> None:
    with pytest.raises(LeaseLost):
        lease_backend.heartbeat(f"{JOB}@2001-01-01T00:00:00Z", 1, 30)


# -- start (the running half) ---------------------------------------------------------------


def test_start_hands_the_run_to_its_runner_once(lease_backend: LeaseBackend) -> None:
    run = lease_run(lease_backend, owner="beat")
    started = lease_backend.start(run.id, run.token, "worker-1", 30)
    assert (started.id, started.token, started.owner, started.attempt) == (
        run.id, run.token, "worker-1", 1,
    )  # fmt: skip
    assert lease_backend.start(run.id, run.token, "worker-1", 30).owner == "worker-1"  # redelivery
    with pytest.raises(LeaseLost):
        lease_backend.start(run.id, run.token, "worker-2", 30)  # a duplicate delivery elsewhere
    with pytest.raises(LeaseLost):
        lease_backend.start(run.id, run.token - 1, "worker-2", 30)  # an older message


# -- expiry on the store's clock, takeover ----------------------------------------------------


def test_expired_lease_is_taken_over_with_a_new_token(lease_backend: LeaseBackend) -> None:
    run = lease_run(lease_backend, owner="a", lease=SHORT, max_attempts=3)
    assert lease_backend.acquire(req(owner="b")).outcome is Outcome.HELD
    lease_ran_out(lease_backend, run.id)
    assert run.id in {r.id for r in lease_backend.reclaimable()}
    result = lease_backend.acquire(req(owner="b", lease=30))
    assert result.outcome is Outcome.WON and result.run is not None
    assert result.run.attempt == 2 and result.run.token > run.token and result.run.owner == "b"
    with pytest.raises(LeaseLost):
        lease_backend.heartbeat(run.id, run.token, 30)
    with pytest.raises(LeaseLost):
        lease_backend.finish(run.id, run.token, succeeded=True)
    assert lease_backend.finish(run.id, result.run.token, succeeded=True) is RunState.SUCCEEDED


def test_a_finish_with_the_current_token_is_accepted_after_the_lease_ran_out(
    lease_backend: LeaseBackend,
) -> None:
    # A runner cut off from the store for longer than its lease finished its work meanwhile:
    # nobody took the run over, so its finish still carries the current token and is recorded.
    run = lease_run(lease_backend, lease=0.5, max_attempts=3)
    assert lease_backend.start(run.id, run.token, "a", 0.5).token == run.token
    time.sleep(1.0)
    assert run.id in {r.id for r in lease_backend.reclaimable()}
    assert lease_backend.finish(run.id, run.token, succeeded=True) is RunState.SUCCEEDED
    assert state_of(lease_backend, run.id) is RunState.SUCCEEDED
    assert lease_backend.acquire(req(owner="b")).outcome is not Outcome.WON
    failed = lease_run(lease_backend, 1, lease=0.5, max_attempts=1)
    time.sleep(1.0)
    assert (
        lease_backend.finish(failed.id, failed.token, succeeded=False, error="x") is RunState.FAILED
    )


def test_heartbeat_keeps_the_lease_alive(lease_backend: LeaseBackend) -> None:
    run = lease_run(lease_backend, lease=SHORT)
    ends = time.monotonic() + SHORT + 1  # past the first lease period, beating every 0.5 s
    while time.monotonic() < ends:
        time.sleep(0.5)
        lease_backend.heartbeat(run.id, run.token, SHORT)
    assert lease_backend.acquire(req(owner="b")).outcome is Outcome.HELD
    assert run.id not in {r.id for r in lease_backend.reclaimable()}


def test_a_dead_runner_uses_an_attempt(lease_backend: LeaseBackend) -> None:
    lease_run(lease_backend, lease=0.3, max_attempts=1)
    time.sleep(0.8)
    assert lease_backend.acquire(req(owner="b")).outcome is Outcome.EXHAUSTED
    (record,) = lease_backend.runs(JOB)
    assert record.state is RunState.FAILED


# -- max attempts, hand-over ---------------------------------------------------------------


def test_failed_run_is_retried_until_max_attempts(lease_backend: LeaseBackend) -> None:
    first = lease_run(lease_backend, max_attempts=2)
    assert (
        lease_backend.finish(first.id, first.token, succeeded=False, error="boom")
        is RunState.PENDING
    )
    assert first.id in {r.id for r in lease_backend.reclaimable()}
    second = lease_run(lease_backend, owner="b", max_attempts=2)
    assert second.attempt == 2 and second.token > first.token
    assert lease_backend.finish(second.id, second.token, succeeded=False) is RunState.FAILED
    assert lease_backend.acquire(req(owner="c")).outcome is Outcome.FINISHED


def test_release_hands_over_at_once_without_using_an_attempt(lease_backend: LeaseBackend) -> None:
    run = lease_run(lease_backend, max_attempts=1)
    lease_backend.start(run.id, run.token, "a", 30)
    lease_backend.release(run.id, run.token)
    assert state_of(lease_backend, run.id) is RunState.PENDING
    taken = lease_run(lease_backend, owner="b", max_attempts=1)
    assert taken.attempt == 2 and taken.token > run.token
    with pytest.raises(LeaseLost):
        lease_backend.heartbeat(run.id, run.token, 30)


def test_a_run_released_before_it_started_gives_its_attempt_back(
    lease_backend: LeaseBackend,
) -> None:
    # A won run its store did not confirm (or could not be dispatched) is handed back unstarted.
    run = lease_run(lease_backend, max_attempts=2)
    lease_backend.release(run.id, run.token)
    taken = lease_run(lease_backend, owner="b", max_attempts=2)
    assert taken.attempt == 1 and taken.token > run.token
    lease_backend.start(taken.id, taken.token, "b", 30)
    assert lease_backend.finish(taken.id, taken.token, succeeded=False) is RunState.PENDING
    third = lease_run(lease_backend, owner="c", max_attempts=2)
    assert third.attempt == 2
    lease_backend.release(third.id, third.token)
    assert lease_run(lease_backend, owner="d", max_attempts=2).attempt == 2


# -- overlap, stale, skips, catch-up support --------------------------------------------------


def test_overlap_skip_records_the_run_skipped(lease_backend: LeaseBackend) -> None:
    first = lease_run(lease_backend, 0, overlap_skip=True)
    assert lease_backend.acquire(req(1, overlap_skip=True)).outcome is Outcome.OVERLAP
    (skipped,) = [r for r in lease_backend.runs(JOB) if r.scheduled_for == slot(1)]
    assert (skipped.state, skipped.reason) == (RunState.SKIPPED, "overlap")
    assert lease_backend.acquire(req(1, owner="b")).outcome is Outcome.FINISHED
    lease_backend.finish(first.id, first.token, succeeded=True)
    assert lease_backend.acquire(req(2, overlap_skip=True)).outcome is Outcome.WON


def test_overlap_allow_runs_side_by_side(lease_backend: LeaseBackend) -> None:
    lease_run(lease_backend, 0)
    assert lease_backend.acquire(req(1)).outcome is Outcome.WON


def test_overlap_ignores_expired_leases(lease_backend: LeaseBackend) -> None:
    lease_run(lease_backend, 0, lease=0.3)
    time.sleep(0.8)
    assert lease_backend.acquire(req(1, overlap_skip=True)).outcome is Outcome.WON


def test_stale_run_is_recorded_skipped(lease_backend: LeaseBackend) -> None:
    result = lease_backend.acquire(req(0, stale_after=60))  # the slot is about 30 minutes old
    assert result.outcome is Outcome.STALE and result.run is None
    (record,) = lease_backend.runs(JOB)
    assert (record.state, record.reason) == (RunState.SKIPPED, "stale")
    assert lease_backend.acquire(req(25, stale_after=3600)).outcome is Outcome.WON


def test_skip_records_once(lease_backend: LeaseBackend) -> None:
    assert lease_backend.skip(JOB, slot(0), "missed") is True
    assert lease_backend.skip(JOB, slot(0), "missed") is False
    assert lease_backend.acquire(req(0)).outcome is Outcome.FINISHED
    run = lease_run(lease_backend, 1)
    assert lease_backend.skip(JOB, slot(1), "missed") is False
    assert state_of(lease_backend, run.id) is RunState.RUNNING


def test_skip_many_records_each_run_once_in_any_order(lease_backend: LeaseBackend) -> None:
    run = lease_run(lease_backend, 1)
    batch = [("other-job", slot(3)), (JOB, slot(2)), (JOB, slot(1)), (JOB, slot(0)), (JOB, slot(2))]
    assert lease_backend.skip_many(batch, "missed") == [True, True, False, True, False]
    assert state_of(lease_backend, run.id) is RunState.RUNNING
    skipped = [r for r in lease_backend.runs(JOB) if r.state is RunState.SKIPPED]
    assert sorted(r.scheduled_for for r in skipped) == [slot(0), slot(2)]
    assert {r.reason for r in skipped} == {"missed"}
    assert lease_backend.last_slot("other-job") == slot(3)
    assert lease_backend.skip_many([], "missed") == []


def test_last_slot_and_runs_listing(lease_backend: LeaseBackend) -> None:
    assert lease_backend.last_slot(JOB) is None
    lease_run(lease_backend, 2)
    lease_backend.skip(JOB, slot(5), "missed")
    lease_run(lease_backend, 3)
    assert lease_backend.last_slot(JOB) == slot(5)
    assert lease_backend.last_slot("other-job") is None
    assert lease_backend.last_slots([JOB, "other-job"]) == {JOB: slot(5), "other-job": None}
    assert lease_backend.last_slots([]) == {}
    assert [r.scheduled_for for r in lease_backend.runs(JOB)] == [slot(5), slot(3), slot(2)]
    assert [r.scheduled_for for r in lease_backend.runs(JOB, limit=1)] == [slot(5)]


def test_store_clock_is_sane(lease_backend: LeaseBackend) -> None:
    assert abs((lease_backend.now() - datetime.now(UTC)).total_seconds()) < 300


# -- a store that loses its last writes ---------------------------------------------------------


def test_a_lost_tail_never_hands_a_token_out_again(lease_url: str, tmp_path: Path) -> None:
    """The store is copied at one moment, used on, then restored: a crash that lost the tail.

    What the lost tail must not do, checked here:

    1. every token handed out after the loss is greater than every token handed out before it,
       kept or lost, so a fenced resource accepts the new runner's writes at once;
    2. a run whose success the store kept is never leased again (``FINISHED``);
    3. a finish carrying a token from before the loss is refused on a run leased after it, and
       leaves it running: a success is only recorded by the run's current lease, so no token's
       success is recorded twice.

    What it may do (a run only the lost tail knew finished is leased and run again) is the cost
    the backend's page in docs/backends states.
    """
    tail = lose_tail(lease_url)
    backend = open_backend(lease_url)
    kept = lease_run(backend, 0)
    assert backend.finish(kept.id, kept.token, succeeded=True) is RunState.SUCCEEDED
    held = lease_run(backend, 1, lease=0.5, max_attempts=2)  # its finish will be lost
    tail.copy()
    backend.finish(held.id, held.token, succeeded=True)
    lost = [lease_run(backend, index) for index in (2, 3, 4)]
    for run in lost[:2]:
        assert backend.finish(run.id, run.token, succeeded=True) is RunState.SUCCEEDED
    fence = SQLFence.sqlite(tmp_path / "fenced.db")
    assert fence.write("report", lost[-1].token, "before the loss")
    handed_out = max(run.token for run in [kept, held, *lost])
    backend.close()
    tail.restore()
    time.sleep(0.6)  # the copy's lease of run 1 expires
    backend = open_backend(lease_url)
    try:
        assert backend.acquire(req(0, owner="b")).outcome is Outcome.FINISHED
        results = backend.acquire_many([req(index, owner="b") for index in (2, 3, 4)])
        again = [result.run for result in results if result.run is not None]
        assert len(again) == 3
        taken = lease_run(backend, 1, owner="b")  # a batch of one: the single acquire
        assert min(run.token for run in [*again, taken]) > handed_out
        assert fence.write("report", again[-1].token, "after the loss")
        for old, new in [*zip(lost, again, strict=True), (held, taken)]:
            with pytest.raises(LeaseLost):
                backend.finish(old.id, old.token, succeeded=True)
            assert state_of(backend, new.id) is RunState.RUNNING
            assert backend.finish(new.id, new.token, succeeded=True) is RunState.SUCCEEDED
    finally:
        backend.close()


# -- real processes ---------------------------------------------------------------------------


@pytest.mark.slow
def test_racing_processes_give_one_winner_per_run(lease_url: str) -> None:
    slots = [int(slot(i).timestamp() * 1000) for i in range(200)]
    start_at = time.time() + 3
    workers = [
        procs.spawn(
            "race-acquire",
            {"url": lease_url, "job": JOB, "owner": f"p{n}", "slots": slots, "start_at": start_at},
        )
        for n in range(4)
    ]
    for worker in workers:
        assert procs.next_event(worker)["event"] == "ready"
    wins = Counter()
    for worker in workers:
        wins.update(procs.next_event(worker)["won"])
        procs.finish(worker)
    assert set(wins) == set(slots)
    assert set(wins.values()) == {1}


@pytest.mark.slow
def test_runner_killed_with_sigkill_is_taken_over(
    lease_url: str, lease_backend: LeaseBackend
) -> None:
    holder = procs.spawn(
        "hold",
        {
            "url": lease_url,
            "job": JOB,
            "slot": _ms(0),
            "owner": "doomed",
            "lease": SHORT,
            "heartbeat": 0.3,
        },
    )
    held = procs.next_event(holder)
    assert lease_backend.acquire(req(owner="backup")).outcome is Outcome.HELD
    time.sleep(SHORT + 1)  # heartbeats keep it alive past its first lease period
    assert lease_backend.acquire(req(owner="backup")).outcome is Outcome.HELD
    procs.kill(holder)
    deadline = time.monotonic() + 30
    while (
        result := lease_backend.acquire(req(owner="backup", max_attempts=3))
    ).outcome is Outcome.HELD:
        assert time.monotonic() < deadline, "the dead runner's lease never expired"
        time.sleep(0.2)
    assert result.outcome is Outcome.WON and result.run is not None
    assert result.run.token > held["token"] and result.run.attempt == 2


@pytest.mark.slow
def test_runner_frozen_past_its_lease_is_fenced_out(
    lease_url: str, lease_backend: LeaseBackend, tmp_path: Path
) -> None:
    fence_db = tmp_path / "fenced.db"
    holder = procs.spawn(
        "hold",
        {
            "url": lease_url, "job": JOB, "slot": _ms(0), "owner": "frozen", "lease": 1.0,
            "heartbeat": 0.2, "fence_db": str(fence_db),
        },
    )  # fmt: skip
    held = procs.next_event(holder)
    os.kill(holder.pid, signal.SIGSTOP)
    try:
        time.sleep(1.6)
        result = lease_backend.acquire(req(owner="successor", max_attempts=3))
        assert result.outcome is Outcome.WON and result.run is not None
        assert result.run.token > held["token"]
        assert SQLFence.sqlite(fence_db).write("report", result.run.token, "from the successor")
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    assert procs.next_event(holder)["event"] == "woke"
    stale = procs.next_event(holder)
    assert stale == {
        "event": "stale",
        "heartbeat": "refused",
        "fenced_write": "refused",
        "finish": "refused",
    }
    procs.finish(holder)
    assert SQLFence.sqlite(fence_db).read("report") == (result.run.token, "from the successor")
    assert state_of(lease_backend, result.run.id) is RunState.RUNNING


# -- instances' heartbeats ------------------------------------------------------------------


def instance(owner: str, role: str = "scheduler", interval: float = 10.0) -> InstanceInfo:
    started = datetime(2026, 11, 30, 8, 0, 0, 123000, tzinfo=UTC)
    return InstanceInfo(owner, role, "host-1", 4242, started, "9.9.9", interval)


def test_record_instance_lists_it_with_the_store_clock(lease_backend: LeaseBackend) -> None:
    before = lease_backend.now()
    lease_backend.record_instance(instance("a:1", "scheduler", 2.5), ttl=600)
    lease_backend.record_instance(instance("b:2", "dramatiq-worker"), ttl=600)
    after = lease_backend.now()
    found = lease_backend.instances()
    assert [(i.role, i.owner) for i in found] == [("dramatiq-worker", "b:2"), ("scheduler", "a:1")]
    a = found[1]
    assert (a.host, a.pid, a.version, a.interval) == ("host-1", 4242, "9.9.9", 2.5)
    assert a.started_at == instance("a:1").started_at
    assert a.beat_at is not None and a.expires_at is not None
    assert before - timedelta(milliseconds=1) <= a.beat_at <= after + timedelta(milliseconds=1)
    assert abs((a.expires_at - a.beat_at).total_seconds() - 600) < 0.01


def test_record_instance_replaces_the_same_owners_record(lease_backend: LeaseBackend) -> None:
    lease_backend.record_instance(instance("a:1", "beat"), ttl=600)
    (first,) = lease_backend.instances()
    time.sleep(0.05)
    lease_backend.record_instance(instance("a:1", "worker"), ttl=600)
    (second,) = lease_backend.instances()
    assert second.role == "worker"
    assert first.beat_at is not None and second.beat_at is not None
    assert second.beat_at > first.beat_at


def test_an_instance_that_stops_beating_expires(lease_backend: LeaseBackend) -> None:
    lease_backend.record_instance(instance("gone:1"), ttl=SHORT)
    lease_backend.record_instance(instance("here:2"), ttl=600)
    assert {i.owner for i in lease_backend.instances()} == {"gone:1", "here:2"}
    wait_until(lambda: [i.owner for i in lease_backend.instances()] == ["here:2"], "gone:1 expires")
    lease_backend.record_instance(instance("here:2"), ttl=600)  # another's beat does not revive it
    assert [i.owner for i in lease_backend.instances()] == ["here:2"]
    lease_backend.record_instance(instance("gone:1"), ttl=600)  # its own beat does
    assert {i.owner for i in lease_backend.instances()} == {"gone:1", "here:2"}


def test_a_read_only_open_reads_instances_and_runs(
    lease_url: str, lease_backend: LeaseBackend
) -> None:
    lease_backend.record_instance(instance("a:1"), ttl=600)
    run = lease_run(lease_backend)
    lease_backend.finish(run.id, run.token, succeeded=False, error="ValueError: boom")
    reader = open_backend(lease_url, read_only=True)
    try:
        assert reader.capability == "lease"
        assert [i.owner for i in reader.instances()] == ["a:1"]
        (record,) = reader.runs(JOB)
        assert (record.id, record.error) == (run.id, "ValueError: boom")
    finally:
        reader.close()


def _ms(index: int) -> int:
    return int(slot(index).timestamp() * 1000)

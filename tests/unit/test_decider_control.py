"""The deciding half with the control plane: jitter, buffer_one, manual runs, registration and
pruning, driven by an injected clock shared by the instance and the SQLite store."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from relay import ConfigurationError, RunState, UnsupportedOption
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.backends.sqlite_claim import SQLiteClaimBackend
from relay.jobs import check_retention, jitter_delay, make_job
from relay.runs import from_ms, run_from_headers, run_to_headers
from relay.testing import FakeClock
from tests.fixtures import T0, decider

UTC = timezone.utc


def test_jitter_is_the_same_everywhere_and_within_its_window() -> None:
    slot = datetime(2026, 11, 29, 12, tzinfo=UTC)
    delays = [jitter_delay(f"job-{n}", slot, 30) for n in range(200)]
    assert all(0 <= d < 30 for d in delays) and len(set(delays)) == 200
    assert max(delays) > 20 and min(delays) < 10  # spread over the window
    assert jitter_delay("job-1", slot, 30) == delays[1]
    assert jitter_delay("job-1", slot, 0) == 0


def test_a_jittered_slot_starts_after_its_delay_on_every_instance(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    slot = datetime.fromtimestamp(T0, UTC)
    delay = jitter_delay("job", slot, 50)
    first, second = (
        decider(clocked_store, fake_clock, "a", jitter=50),
        decider(clocked_store, fake_clock, "b", jitter=50),
    )
    fake_clock.advance(delay - 0.5)
    assert first.tick() == [] and second.tick() == []
    fake_clock.advance(1)
    won = first.tick() + second.tick()
    assert [w.run.id for w in won] == ["job@2026-11-29T12:00:00Z"]  # the id stays the slot


def test_buffer_one_waits_for_the_live_run_then_runs_at_the_next_sweep(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    d = decider(clocked_store, fake_clock, overlap="buffer_one")
    (first,) = d.tick()
    clocked_store.heartbeat(first.run.id, first.run.token, 600)  # still running at 12:02
    fake_clock.advance(60)
    assert d.tick() == []  # 12:01 waits
    fake_clock.advance(60)
    assert d.tick() == []  # 12:02 is skipped: one already waits
    states = {r.id.split("@")[1]: (r.state, r.reason) for r in clocked_store.runs("job")}
    assert states["2026-11-29T12:01:00Z"] == (RunState.PENDING, "buffered")
    assert states["2026-11-29T12:02:00Z"] == (RunState.SKIPPED, "overlap")
    assert d.sweep() == []  # still waiting
    clocked_store.finish(first.run.id, first.run.token, succeeded=True)
    (buffered,) = d.sweep()
    assert buffered.run.id == "job@2026-11-29T12:01:00Z" and buffered.run.attempt == 1


def test_a_sweep_leases_a_manual_run_with_the_jobs_attempts(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    d = decider(clocked_store, fake_clock, max_attempts=2)
    d.tick()
    triggered = clocked_store.trigger("job")
    (won,) = d.sweep()
    assert won.run.id == triggered.id and won.run.scheduled_for == triggered.scheduled_for
    assert run_from_headers(run_to_headers(won.run)) == won.run  # hosts carry it in messages
    assert clocked_store.finish(won.run.id, won.run.token, succeeded=False) is RunState.PENDING
    (again,) = d.sweep()
    assert again.run.attempt == 2
    assert clocked_store.finish(again.run.id, again.run.token, succeeded=False) is RunState.FAILED


def test_the_first_sweep_registers_each_job_and_a_paused_job_is_skipped(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    d = decider(clocked_store, fake_clock, jitter=5, overlap="skip")
    d.sweep()
    (info,) = clocked_store.jobs()
    spec = json.loads(info.spec or "")
    assert (spec["every"], spec["jitter"], spec["overlap"]) == (60, 5, "skip")
    clocked_store.pause("job", "why", "me")
    fake_clock.advance(10)
    assert d.tick() == []
    (record,) = clocked_store.runs("job")
    assert (record.state, record.reason) == (RunState.SKIPPED, "paused")


def test_sweeps_prune_past_retention_at_most_every_prune_every(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    d = decider(clocked_store, fake_clock)
    d.retention, d.prune_every = 300, 3600
    for _ in range(5):
        for won in d.tick():
            clocked_store.finish(won.run.id, won.run.token, succeeded=True)
        fake_clock.advance(60)
    fake_clock.advance(600)
    d.sweep()
    assert [r.scheduled_for for r in clocked_store.runs("job")] == [
        from_ms(round(T0 * 1000) + 240_000)
    ]
    for won in d.tick():  # 12:15 runs; the slots missed since 12:05 are recorded skipped
        clocked_store.finish(won.run.id, won.run.token, succeeded=True)
    fake_clock.advance(600)
    recorded = len(clocked_store.runs("job"))
    d.sweep()  # within prune_every of the last prune: nothing is pruned
    assert len(clocked_store.runs("job")) == recorded > 1
    d._next_prune = 0  # as if prune_every had passed
    d.sweep()
    assert len(clocked_store.runs("job")) == 1


def test_a_full_prune_batch_prunes_again_at_the_next_sweep(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    d = decider(clocked_store, fake_clock)
    d.retention, d.prune_every, d.prune_batch = 300, 3600, 2
    for _ in range(6):
        for won in d.tick():
            clocked_store.finish(won.run.id, won.run.token, succeeded=True)
        fake_clock.advance(60)
    fake_clock.advance(600)
    counts = []
    for _ in range(5):
        d.sweep()
        counts.append(len(clocked_store.runs("job")))
    # 6 runs: full batches of 2 at once, then a short batch of 1 (the latest run is kept), then
    # nothing until prune_every has passed.
    assert counts == [4, 2, 1, 1, 1]


def test_options_are_checked_where_the_job_is_made(tmp_path: Path) -> None:
    lease = SQLiteLeaseBackend(tmp_path / "l.db")
    claim = SQLiteClaimBackend(tmp_path / "c.db")
    try:
        with pytest.raises(ConfigurationError, match="stale_after"):
            make_job(lease, name="j", every=60, jitter=30, stale_after=20)
        with pytest.raises(UnsupportedOption):
            make_job(claim, name="j", every=60, overlap="buffer_one")
        assert make_job(claim, name="j", every=60, jitter=5).jitter == 5
        with pytest.raises(UnsupportedOption):
            check_retention(claim, 60)
        assert check_retention(lease, None) == 30 * 24 * 3600
        assert check_retention(lease, "never") is None
        assert check_retention(lease, timedelta(days=1)) == 86400
        with pytest.raises(ConfigurationError):
            check_retention(lease, 0)
    finally:
        lease.close()
        claim.close()

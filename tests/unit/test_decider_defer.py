"""A deferred job (a peer's definition of it decides) is not fired here: no slot, retry or
takeover; fired again, it starts from its history in the store (issue 39, item 7)."""

from __future__ import annotations

from relay.backends.sqlite import SQLiteLeaseBackend
from relay.testing import FakeClock
from tests.fixtures import decider


def test_a_deferred_job_fires_no_slot_and_takes_no_run_over(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    here = decider(clocked_store, fake_clock, "here")
    (first,) = here.tick()  # 12:00, then its runner dies: the lease runs out
    here.defer("job")
    fake_clock.advance(120)
    assert here.tick() == []  # 12:01 and 12:02 are not fired here
    assert here.sweep() == []  # nor is 12:00 taken over
    assert [r.id for r in clocked_store.runs("job")] == [first.run.id]
    peer = decider(clocked_store, fake_clock, "peer")
    taken = [w.run.id for w in peer.sweep()] + [w.run.id for w in peer.tick()]
    assert taken == [first.run.id, "job@2026-11-29T12:02:00Z"]  # the deciding peer fires them


def test_fired_again_a_job_starts_after_its_last_recorded_slot(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    here, peer = decider(clocked_store, fake_clock, "here"), decider(clocked_store, fake_clock, "p")
    here.defer("job")
    assert here.tick() == [] and [w.run.id for w in peer.tick()] == ["job@2026-11-29T12:00:00Z"]
    fake_clock.advance(60)
    assert [w.run.id for w in peer.tick()] == ["job@2026-11-29T12:01:00Z"]
    fake_clock.advance(30)  # the peer stops; this instance's definition decides again
    here.undefer("job")
    assert here.next_due() is not None and here.tick() == []  # 12:01 ran: nothing new is due
    fake_clock.advance(30)
    assert [w.run.id for w in here.tick()] == ["job@2026-11-29T12:02:00Z"]


def test_defer_ignores_unknown_jobs_and_remove_forgets_a_deferral(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock
) -> None:
    here = decider(clocked_store, fake_clock)
    here.defer("nope")
    here.defer("job")
    here.remove("job")
    assert here.deferred == set()

"""A job's schedule changed in a rolling deploy runs on one definition only (issue 39, item 7).

Old instances (the job's old definition) and new ones (its new definition) run side by side on one
store, in fake time: the new definition decides every slot from its first instance's start, and
the old instances fire nothing of that job until they stop. On every lease store.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import relay
from relay.events import DefinitionDeferred, DefinitionResumed, Event
from relay.testing import FakeClock

UTC = timezone.utc
START = datetime(2026, 12, 7, 8, 50, tzinfo=UTC)


@pytest.fixture
def relay_clock_start() -> datetime:
    return START


class Fleet:
    """Schedulers on one store, driven by one fake clock; each records who ran which slot."""

    def __init__(self, clock: FakeClock, url: str) -> None:
        self.clock = clock
        self.url = url
        self.ran: list[tuple[str, datetime]] = []
        self.events: list[Event] = []
        self.schedulers: dict[str, relay.Scheduler[Any]] = {}

    def start(self, owner: str, **schedule: Any) -> relay.Scheduler[Any]:
        scheduler: relay.Scheduler[Any] = relay.Scheduler(self.url, owner=owner, clock=self.clock)
        scheduler.events.on(DefinitionDeferred, self.events.append)
        scheduler.events.on(DefinitionResumed, self.events.append)

        @scheduler.job(name="report", **schedule)
        def report(run: relay.Run) -> None:
            self.ran.append((owner, run.scheduled_for))

        self.schedulers[owner] = scheduler
        self.clock.drive(scheduler)
        return scheduler

    def stop(self, owner: str) -> None:
        self.clock.stop(self.schedulers[owner])

    def close(self) -> None:
        for scheduler in self.schedulers.values():
            scheduler.backend.close()


@pytest.fixture
def fleet(relay_clock: FakeClock, lease_url: str) -> Any:
    fleet = Fleet(relay_clock, lease_url)
    yield fleet
    fleet.close()


def test_a_cron_changed_mid_rollout_runs_once_that_day(fleet: Fleet) -> None:
    old, new = {"cron": "0 9 * * *"}, {"cron": "0 10 * * *"}
    fleet.start("old-1", **old)
    fleet.start("old-2", **old)
    fleet.clock.advance(minutes=5)  # 08:55: the first new instance
    fleet.start("new-1", **new)
    fleet.clock.advance(minutes=35)  # 09:30: an old one stops, a second new one starts
    fleet.stop("old-1")
    fleet.start("new-2", **new)
    fleet.clock.advance(minutes=35)  # 10:05: the last old one stops
    fleet.stop("old-2")
    fleet.clock.advance(minutes=5)

    day = START.replace(hour=0, minute=0)
    assert [slot for _, slot in fleet.ran] == [day.replace(hour=10)]
    assert fleet.ran[0][0].startswith("new-")
    with relay.Control(fleet.url) as control:
        slots = [r.scheduled_for for r in control.runs("report")]
    assert slots == [day.replace(hour=10)]  # 09:00 was never even leased
    deferred = [e for e in fleet.events if isinstance(e, DefinitionDeferred)]
    assert {e.owner for e in deferred} == {"old-1", "old-2"}
    for event in deferred:
        assert "0 9 * * *" in event.ours and "0 10 * * *" in event.deciding
        assert event.deciding_owner == "new-1"
        assert event.ours_hash != event.deciding_hash


def test_a_shorter_every_never_runs_the_old_cadence_after_the_first_new_instance(
    fleet: Fleet,
) -> None:
    fleet.start("old-1", every=60)
    fleet.start("old-2", every=60)
    fleet.clock.advance(minutes=5, seconds=5)  # 08:55:05: the first new instance
    started = fleet.clock.now()
    fleet.start("new-1", every=30)
    fleet.clock.advance(minutes=5)
    fleet.stop("old-1")
    fleet.start("new-2", every=30)
    fleet.clock.advance(minutes=5)
    fleet.stop("old-2")
    fleet.clock.advance(minutes=5)

    before = [slot for _, slot in fleet.ran if slot < started]
    after = [(owner, slot) for owner, slot in fleet.ran if slot >= started]
    assert before == [START + timedelta(minutes=k) for k in range(6)]
    # From the first new instance on, every slot is the new cadence's, once, run by a new one.
    first = started + timedelta(seconds=25)  # 08:55:30
    assert [slot for _, slot in after] == [first + timedelta(seconds=30 * k) for k in range(30)]
    assert {owner for owner, _ in after} <= {"new-1", "new-2"}


def test_a_rollback_gives_the_job_back_to_the_old_definition(fleet: Fleet) -> None:
    old, new = {"cron": "0 9 * * *"}, {"cron": "0 10 * * *"}
    fleet.start("old-1", **old)
    fleet.clock.advance(minutes=2)
    fleet.start("canary", **new)
    fleet.clock.advance(minutes=3)  # 08:55: the canary is rolled back
    fleet.stop("canary")
    fleet.start("old-2", **old)
    fleet.clock.advance(minutes=70)

    day = START.replace(hour=0, minute=0)
    assert [slot for _, slot in fleet.ran] == [day.replace(hour=9)]
    resumed = [e for e in fleet.events if isinstance(e, DefinitionResumed)]
    assert [e.owner for e in resumed] == ["old-1"]

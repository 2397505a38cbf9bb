"""A job's schedule changed in a rolling deploy runs on one definition only (issue 39, item 7).

Old instances (the job's old definition) and new ones (its new definition) run side by side on one
store, in fake time: the new definition decides every slot from its first instance's start, and
the old instances fire nothing of that job until they stop. On every lease store.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from click.testing import CliRunner

import relay
from relay import open_backend
from relay.cli import main
from relay.events import DefinitionDeferred, DefinitionResumed, Event
from relay.instances import InstanceInfo
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


def test_relay_jobs_shows_the_disagreement_while_it_lasts(fleet: Fleet) -> None:
    fleet.start("old-1", cron="0 9 * * *")
    fleet.clock.advance(minutes=1)
    fleet.start("new-1", cron="0 10 * * *")
    fleet.clock.advance(seconds=20)

    table = CliRunner().invoke(main, ["jobs", "--backend", fleet.url], env={"COLUMNS": "250"})
    assert table.exit_code == 0, table.output
    assert "definitions" in table.output
    assert "deciding: cron '0 10 * * *' (UTC)" in table.output
    assert "not fired: cron '0 9 * * *' (UTC)" in table.output and "old-1" in table.output
    listed = CliRunner().invoke(main, ["jobs", "--backend", fleet.url, "--json"])
    definition = json.loads(listed.output)["definition"]
    assert (definition["owner"], definition["holders"]) == ("new-1", ["new-1"])
    [other] = definition["others"]
    assert (other["text"], other["owners"]) == ("cron '0 9 * * *' (UTC)", ["old-1"])

    if not fleet.url.startswith("sqlite"):
        return  # a server's clock judges liveness: old-1 would stay alive for 30 real seconds
    fleet.stop("old-1")  # gone: its beats stop, and after three of them it is dead
    fleet.clock.advance(minutes=1)
    with relay.Control(fleet.url) as control:
        [status] = control.jobs()
    assert not status.disagreement and status.definition is not None
    assert status.definition.owner == "new-1"
    table = CliRunner().invoke(main, ["jobs", "--backend", fleet.url], env={"COLUMNS": "250"})
    assert "definitions" not in table.output


def test_an_instance_that_is_not_working_decides_nothing(fleet: Fleet) -> None:
    fleet.start("old-1", cron="0 9 * * *")
    broken = InstanceInfo(
        "new-broken", "scheduler", "h", 1, datetime.now(UTC), "9.0.0", 10.0,
        definitions={"report": "0123456789ab"},
        definition_texts={"0123456789ab": "cron '0 10 * * *' (UTC)"},
        problem="its steps have failed for longer than a lease (60s): store unavailable",
    )  # fmt: skip
    # A newer release's definition, on an instance whose ticks fail: it fires nothing.
    store = open_backend(fleet.url)
    assert store.capability == "lease"

    def beat() -> float:
        store.record_instance(broken, ttl=600)
        return 10.0

    fleet.clock.drive(beat)
    fleet.clock.advance(minutes=15)
    fleet.clock.stop(beat)
    store.close()
    assert fleet.ran == [("old-1", START.replace(hour=9, minute=0))]
    assert not [e for e in fleet.events if isinstance(e, DefinitionDeferred)]


def test_an_instance_of_relay_0_1_0_declaring_nothing_blocks_nobody(fleet: Fleet) -> None:
    fleet.start("new-1", cron="0 9 * * *")
    old = InstanceInfo(
        "old-0.1.0", "scheduler", "h", 1, datetime.now(UTC), "0.1.0", 10.0
    )  # started after new-1, an older release, and no definitions: what 0.1.0 records
    store = open_backend(fleet.url)
    assert store.capability == "lease"

    def beat() -> float:
        store.record_instance(old, ttl=600)
        return 10.0

    fleet.clock.drive(beat)
    fleet.clock.advance(minutes=15)
    fleet.clock.stop(beat)
    store.close()
    assert fleet.ran == [("new-1", START.replace(hour=9, minute=0))]
    assert not [e for e in fleet.events if isinstance(e, DefinitionDeferred)]

"""Stored schedules: checked with the jobs' rules, applied by the engine's feed, driven by a clock.

The decider and a SQLite store share an injected clock, so a change's time and the slots around
it are exact: a change never fires a slot before it, nor at once, and is applied at the next step.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from relay import ConfigurationError, Control, InvalidSchedule
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.engine import Decider
from relay.engine.stored import ScheduleFeed
from relay.events import Event, ScheduleNotRunnable
from relay.stored import Schedule, check_schedule
from relay.testing import FakeClock
from tests.unit.test_decider import Counting

UTC = timezone.utc
T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC).timestamp()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0 - 10)


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[SQLiteLeaseBackend]:
    backend = SQLiteLeaseBackend(tmp_path / "relay.db", clock=clock)
    yield backend
    backend.close()


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, UTC)


class Host:
    """A decider and its feed, allowing task ``echo``."""

    def __init__(self, store: Any, clock: FakeClock, tasks: tuple[str, ...] = ("echo",)) -> None:
        self.decider = Decider(store, owner="a", lease=30, clock=clock)
        self.events: list[Event] = []
        self.decider.events.on(Event, self.events.append)
        self.feed = ScheduleFeed(
            self.decider, store, lambda s: self.handler if s.task in tasks else None
        )

    @staticmethod
    def handler(run: Any) -> None:
        return None

    def step(self) -> list[datetime]:
        """What one loop step does: apply the changes, then tick; the slots won."""
        self.feed.apply()
        return [won.run.scheduled_for for won in self.decider.tick()]


# -- checked at save ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "unknown time zone"),
        ({"every": 60, "tz": "UTC"}, "tz= only applies to cron"),
        ({"at": datetime(2030, 1, 1)}, "aware datetime"),
        ({"at": datetime(2030, 1, 1, tzinfo=UTC), "every": 5}, "give at= alone"),
        ({}, "needs a schedule"),
        ({"every": 60, "args": [object()]}, "JSON values"),
        ({"every": 60, "args": "abc"}, "list or tuple"),
        ({"every": 60, "kwargs": {1: 2}}, "string keys"),
        ({"every": 60, "options": {"x": float("nan")}}, "JSON values"),
        ({"every": 60, "max_runs": 0}, "max_runs"),
        ({"every": 60, "overlap": "never"}, "overlap"),
        ({"every": 60, "max_attempts": 0}, "max_attempts"),
        ({"every": 60, "jitter": 30, "stale_after": 10}, "jitter"),
        ({"every": 60, "start": datetime(2030, 1, 2, tzinfo=UTC),
          "end": datetime(2030, 1, 1, tzinfo=UTC)}, "not after start"),
        ({"every": 60, "start": datetime(2030, 1, 1)}, "aware datetime"),
    ],
)  # fmt: skip
def test_bad_definitions_are_refused_naming_the_fix(
    store: SQLiteLeaseBackend, options: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigurationError, match=match):
        check_schedule(store, "s", "echo", **options)


def test_a_bad_name_or_task_is_refused(store: SQLiteLeaseBackend) -> None:
    with pytest.raises(ConfigurationError, match="job name"):
        check_schedule(store, "a@b", "echo", every=60)
    with pytest.raises(ConfigurationError, match="task"):
        check_schedule(store, "s", "", every=60)
    with pytest.raises(InvalidSchedule):
        Control(store).add_schedule("s", "echo", cron="bad", force=True)


def test_definitions_are_normalised_so_two_spellings_store_the_same(
    store: SQLiteLeaseBackend,
) -> None:
    one = check_schedule(store, "s", "t", every=timedelta(minutes=1), catch_up=timedelta(hours=1))
    two = check_schedule(store, "s", "t", every=60, catch_up=3600.0)
    assert one == two and one.every == 60.0
    zoned = check_schedule(store, "s", "t", cron="0 3 * * *", tz=ZoneInfo("Europe/Paris"))
    assert zoned.tz == "Europe/Paris"
    paris = datetime(2030, 1, 1, 12, tzinfo=ZoneInfo("Europe/Paris"))
    assert check_schedule(store, "s", "t", at=paris).at == datetime(2030, 1, 1, 11, tzinfo=UTC)


def test_an_update_refuses_unknown_fields_and_checks_the_result(store: SQLiteLeaseBackend) -> None:
    control = Control(store)
    control.add_schedule("s", "echo", every=60, force=True)
    with pytest.raises(ConfigurationError, match="cannot change colour"):
        control.update_schedule("s", version=1, colour="red")
    with pytest.raises(ConfigurationError, match="max_attempts"):
        control.update_schedule("s", version=1, max_attempts=-1)
    switched = control.update_schedule("s", version=1, cron="*/5 * * * *", tz="Europe/Paris")
    assert (switched.cron, switched.every, switched.tz) == ("*/5 * * * *", None, "Europe/Paris")


def test_at_must_be_after_the_stores_now(store: SQLiteLeaseBackend) -> None:
    with pytest.raises(ConfigurationError, match=r"not in the future.*relay trigger"):
        Control(store).add_schedule("s", "echo", at=at(-20), force=True)


# -- applied by the engine ------------------------------------------------------------------


def test_an_added_schedule_runs_from_its_first_slot_after_the_add(
    store: SQLiteLeaseBackend, clock: FakeClock
) -> None:
    host = Host(store, clock)
    clock.advance_to(at(30))
    Control(store).add_schedule("s", "echo", every=60, force=True)
    assert host.step() == []  # the slot at T0, 30 s ago, came before the add
    clock.advance_to(at(60))
    assert host.step() == [at(60)]


def test_an_edit_never_fires_at_once_nor_a_slot_before_it(
    store: SQLiteLeaseBackend, clock: FakeClock
) -> None:
    host = Host(store, clock)
    control = Control(store)
    clock.advance_to(at(-1))
    control.add_schedule("s", "echo", every=60, catch_up=3600, force=True)
    clock.advance_to(at(0))
    assert host.step() == [at(0)]
    clock.advance_to(at(590))  # the instance was away: slots 60 … 540 passed
    control.update_schedule("s", version=1, every=120)
    assert host.step() == []  # no catch-up of the slots before the edit, nothing at once
    clock.advance_to(at(600))
    assert host.step() == [at(600)]


def test_a_run_won_before_an_edit_keeps_its_definition(
    store: SQLiteLeaseBackend, clock: FakeClock
) -> None:
    decider = Decider(store, owner="a", lease=30, clock=clock)
    feed = ScheduleFeed(decider, store, lambda s: lambda run: s.args)
    control = Control(store)
    clock.advance_to(at(-1))
    control.add_schedule("s", "echo", every=60, args=[1], force=True)
    clock.advance_to(at(0))
    feed.apply()
    (won,) = decider.tick()
    control.update_schedule("s", version=1, args=[2])
    feed.apply()
    assert won.job.handler is not None and won.job.handler(won.run) == (1,)
    assert decider.jobs["s"].handler is not None and decider.jobs["s"].handler(won.run) == (2,)


def test_pause_resume_and_remove(store: SQLiteLeaseBackend, clock: FakeClock) -> None:
    host = Host(store, clock)
    control = Control(store)
    clock.advance_to(at(-1))
    control.add_schedule("s", "echo", every=60, catch_up=3600, force=True)
    clock.advance_to(at(0))
    assert host.step() == [at(0)]
    control.update_schedule("s", version=1, enabled=False)
    clock.advance_to(at(130))
    assert host.step() == [] and "s" not in host.decider.jobs
    control.update_schedule("s", version=2, enabled=True)
    assert host.step() == []  # the slots missed while paused are not caught up
    clock.advance_to(at(180))
    assert host.step() == [at(180)]
    control.remove_schedule("s")
    clock.advance_to(at(240))
    assert host.step() == [] and host.feed.stored == {}


def test_max_runs_and_at_end_the_schedule(store: SQLiteLeaseBackend, clock: FakeClock) -> None:
    host = Host(store, clock)
    control = Control(store)
    clock.advance_to(at(-1))
    control.add_schedule("few", "echo", every=60, max_runs=2, force=True)
    control.add_schedule("once", "echo", at=at(90), force=True)
    control.add_schedule("window", "echo", every=60, start=at(120), end=at(180), force=True)
    won = []
    for second in range(0, 400, 30):
        clock.advance_to(at(second))
        won += host.step()
    assert sorted(won) == [at(0), at(60), at(90), at(120), at(180)]


def test_a_task_not_allowed_is_reported_once_per_version(
    store: SQLiteLeaseBackend, clock: FakeClock
) -> None:
    host = Host(store, clock, tasks=())
    control = Control(store)
    control.add_schedule("s", "echo", every=60, force=True)
    host.step()
    host.step()
    refused = [e for e in host.events if isinstance(e, ScheduleNotRunnable)]
    assert [(e.schedule, e.version, e.task) for e in refused] == [("s", 1, "echo")]
    assert "does not allow task 'echo'" in refused[0].reason
    assert "s" not in host.decider.jobs and "s" in host.feed.not_runnable


def test_a_host_names_how_to_allow_and_may_refuse_a_definition(
    store: SQLiteLeaseBackend, clock: FakeClock
) -> None:
    """A host's own words for allowing a task; a definition its ``handler_for`` refuses (a host
    option it cannot apply) is reported not runnable, and applied once a fixed version comes."""

    def handler_for(schedule: Schedule) -> Any:
        if schedule.task != "echo":
            return None
        if schedule.options:
            raise ConfigurationError(f"option(s) {sorted(schedule.options)} cannot apply here")
        return Host.handler

    decider = Decider(store, owner="a", lease=30, clock=clock)
    events: list[Event] = []
    decider.events.on(ScheduleNotRunnable, events.append)
    feed = ScheduleFeed(decider, store, handler_for, allow_with="schedulable")
    control = Control(store)
    control.add_schedule("other", "nope", every=60, force=True)
    control.add_schedule("s", "echo", every=60, options={"bad": 1}, force=True)
    feed.apply()
    reasons = {e.schedule: e.reason for e in events}
    assert reasons["other"].endswith("allow it with schedulable('nope')")
    assert "its definition is refused here: option(s) ['bad'] cannot apply here" in reasons["s"]
    assert "s" not in decider.jobs and "s" in feed.not_runnable
    control.update_schedule("s", version=1, options={})
    feed.apply()
    assert "s" in decider.jobs and "s" not in feed.not_runnable


def test_an_idle_step_asks_the_store_one_thing(store: SQLiteLeaseBackend, clock: FakeClock) -> None:
    counting = Counting(store)
    for n in range(50):
        Control(store).add_schedule(f"s{n}", "echo", every=3600, force=True)
    host = Host(counting, clock)
    host.feed.apply()
    counting.calls = 0
    assert host.feed.apply() is False
    assert counting.calls == 1


def test_schedule_fields_are_the_contract() -> None:
    names = [f for f in Schedule.__dataclass_fields__]
    assert names[:2] == ["name", "task"]
    assert {"cron", "every", "at", "tz", "args", "kwargs", "enabled", "start", "end", "max_runs",
            "overlap", "catch_up", "max_attempts", "stale_after", "jitter", "options",
            "description", "version", "updated_at", "updated_by"} <= set(names)  # fmt: skip


def test_an_edit_to_a_shorter_interval_runs_at_its_new_first_slot(
    store: SQLiteLeaseBackend, clock: FakeClock
) -> None:
    """The job's old place in the decider's queue (an hour away) does not hide the new one."""
    host = Host(store, clock)
    control = Control(store)
    control.add_schedule("s", "echo", every=3600, force=True)
    clock.advance_to(at(0))
    assert host.step() == [at(0)]
    clock.advance_to(at(10))
    control.update_schedule("s", version=1, every=60)
    assert host.step() == []
    clock.advance_to(at(60))
    assert host.step() == [at(60)]
    control.update_schedule("s", version=2, every=3600)
    clock.advance_to(at(120))
    assert host.step() == []
    clock.advance_to(at(3600))
    assert host.step() == [at(3600)]


def test_tasks_are_refused_on_a_claim_backend_and_checked(tmp_path: Path) -> None:
    from relay import Scheduler, UnsupportedOption

    claim = Scheduler(f"sqlite:///{tmp_path / 'claims.db'}?strategy=claim")
    with pytest.raises(UnsupportedOption, match="'task' needs a lease backend"):
        claim.register("echo", lambda run: None)
    lease = Scheduler(f"sqlite:///{tmp_path / 'leases.db'}")
    lease.register("echo", lambda run: None)
    with pytest.raises(ConfigurationError, match="already allowed"):
        lease.register("echo", lambda run: None)
    with pytest.raises(ConfigurationError, match="accept the run"):
        lease.register("other", lambda: None)
    assert lease.loop.instance is not None and lease.loop.instance.info.tasks == ("echo",)


def test_a_run_in_flight_finishes_after_its_schedule_is_removed(tmp_path: Path) -> None:
    """Real time: the run started before the removal succeeds; no slot starts after it."""
    import threading
    import time

    from relay import RunState, Scheduler

    url = f"sqlite:///{tmp_path / 'relay.db'}"
    scheduler = Scheduler(url, tick=0.05, lease=5, heartbeat=1)
    started, release = threading.Event(), threading.Event()
    calls: list[str] = []

    @scheduler.task("slow")
    def slow(run: Any) -> None:
        calls.append(run.id)
        started.set()
        release.wait(30)

    instance = threading.Thread(target=scheduler.run)
    instance.start()
    try:
        with Control(url) as control:
            control.add_schedule("s", "slow", every=1, force=True)
            assert started.wait(30)
            control.remove_schedule("s")
            removed = control.schedule_history("s")[-1].at
            time.sleep(0.5)  # the instance applies the removal at its next step
            release.set()
            time.sleep(2)  # two more slots pass
    finally:
        release.set()
        scheduler.stop()
        instance.join(30)
    store = SQLiteLeaseBackend(tmp_path / "relay.db")
    runs = store.runs("s", limit=10)
    store.close()
    assert calls[0] == runs[-1].id and runs[-1].state is RunState.SUCCEEDED
    assert all(r.scheduled_for <= removed for r in runs)


def test_pause_trigger_and_backfill_work_on_a_stored_schedule(
    store: SQLiteLeaseBackend, clock: FakeClock
) -> None:
    host = Host(store, clock)
    control = Control(store)
    control.add_schedule("s", "echo", every=60, force=True)
    clock.advance_to(at(0))
    assert host.step() == [at(0)]
    host.decider.sweep()  # registers the stored schedule's job, as every sweep does
    assert control.job("s").spec["stored"] is True
    triggered = control.trigger("s")
    assert [won.run.id for won in host.decider.sweep()] == [triggered.id]
    control.backfill("s", at(-600), at(-480))
    assert len(host.decider.sweep()) == 3
    assert control.pause("s", "maintenance")
    clock.advance_to(at(60))
    assert host.step() == []  # recorded skipped (paused), as for a code job


def test_an_unreadable_row_is_reported_and_the_rest_applied(
    store: SQLiteLeaseBackend, clock: FakeClock
) -> None:
    host = Host(store, clock)
    store.add_schedule("broken", "{not json", "{}", "hand")
    Control(store).add_schedule("fine", "echo", every=60, force=True)
    host.step()
    refused = [e for e in host.events if isinstance(e, ScheduleNotRunnable)]
    assert [(e.schedule, e.version) for e in refused] == [("broken", 1)]
    assert "cannot be read" in refused[0].reason
    assert set(host.feed.stored) == {"fine"}


def test_an_instance_allowing_no_task_reads_no_stored_schedule(tmp_path: Path) -> None:
    """Its idle tick asks the store nothing, as before stored schedules; a task turns it on."""
    from relay import Scheduler

    scheduler = Scheduler(f"sqlite:///{tmp_path / 'relay.db'}")
    assert scheduler.feed is not None and not scheduler.feed.active
    counting = Counting(scheduler.backend)
    scheduler.feed.store = counting  # type: ignore[assignment]
    assert scheduler.feed.apply() is False and counting.calls == 0
    scheduler.register("echo", lambda run: None)
    scheduler.feed.apply()
    assert counting.calls == 1

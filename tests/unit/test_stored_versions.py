"""A run of a stored schedule runs the version its record keeps, even after an edit (issue 24)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from relay import AcquireRequest, Control, RunState, open_backend
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.cli import main
from relay.engine import Decider
from relay.engine.stored import ScheduleFeed
from relay.events import Event, ScheduleNotRunnable
from relay.runs import from_ms
from relay.stored import from_row, row_at
from relay.testing import FakeClock

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
    """A decider and its feed; each allowed task's handler returns the stored arguments."""

    def __init__(self, store: Any, clock: FakeClock, owner: str, tasks: tuple[str, ...]) -> None:
        self.decider = Decider(store, owner=owner, lease=30, clock=clock)
        self.events: list[Event] = []
        self.decider.events.on(Event, self.events.append)
        self.feed = ScheduleFeed(
            self.decider, store, lambda s: (lambda run, s=s: (s.task, s.args)) if s.task in tasks
            else None,
        )  # fmt: skip
        self.feed.apply()

    def refused(self) -> list[tuple[str, int, str]]:
        return [
            (e.schedule, e.version, e.task) for e in self.events
            if isinstance(e, ScheduleNotRunnable)
        ]  # fmt: skip


def test_a_run_taken_over_after_an_edit_runs_the_version_it_was_leased_with(
    store: SQLiteLeaseBackend, clock: FakeClock
) -> None:
    control = Control(store)
    clock.advance_to(at(-1))
    control.add_schedule("s", "echo", every=60, args=[1], force=True)
    clock.advance_to(at(0))
    a = Host(store, clock, "a", ("echo",))
    (first,) = a.decider.tick()
    assert first.run.schedule_version == 1
    clock.advance_to(at(1))
    control.update_schedule("s", version=1, args=[2])
    b = Host(store, clock, "b", ("echo",))
    assert b.decider.schedule_versions == {"s": 2}
    clock.advance_to(at(40))  # a died: its lease ran out
    (taken,) = b.decider.sweep()
    assert taken.run.id == first.run.id and taken.run.attempt == 2
    assert taken.run.schedule_version == 1 and taken.job is not b.decider.jobs["s"]
    assert taken.job.handler is not None and taken.job.handler(taken.run) == ("echo", (1,))
    (record,) = [r for r in control.runs("s") if r.id == first.run.id]
    assert record.schedule_version == 1
    clock.advance_to(at(60))
    (following,) = b.decider.tick()
    assert following.run.schedule_version == 2 and following.job.handler is not None
    assert following.job.handler(following.run) == ("echo", (2,))
    assert b.refused() == []


def test_a_version_whose_task_is_not_allowed_here_is_reported_and_handed_back(
    store: SQLiteLeaseBackend, clock: FakeClock
) -> None:
    control = Control(store)
    clock.advance_to(at(-1))
    control.add_schedule("s", "old", every=60, args=[1], force=True)
    clock.advance_to(at(0))
    a = Host(store, clock, "a", ("old",))
    (first,) = a.decider.tick()
    clock.advance_to(at(1))
    control.update_schedule("s", version=1, task="new", args=[2], force=True)
    b = Host(store, clock, "b", ("new",))
    clock.advance_to(at(40))
    assert b.decider.sweep() == []  # never run with version 2's task or arguments
    assert b.refused() == [("s", 1, "old")]
    assert "does not allow" in next(
        e.reason for e in b.events if isinstance(e, ScheduleNotRunnable)
    )
    (record,) = [r for r in control.runs("s") if r.id == first.run.id]
    assert record.state is RunState.PENDING and record.schedule_version == 1
    assert b.decider.sweep() == [] and len(b.refused()) == 1  # not asked for again here
    assert "s" in b.decider.jobs  # the current version still runs here
    c = Host(store, clock, "c", ("old", "new"))
    (taken,) = c.decider.sweep()  # an instance allowing the task runs it as it was leased
    assert taken.run.id == first.run.id and taken.job.handler is not None
    assert taken.job.handler(taken.run) == ("old", (1,))


def test_row_at_rebuilds_each_version_from_the_history(
    store: SQLiteLeaseBackend, clock: FakeClock
) -> None:
    control = Control(store)
    control.add_schedule("s", "echo", every=60, args=[1], description="d", force=True)
    control.update_schedule("s", version=1, args=[2], kwargs={"k": 1})
    control.remove_schedule("s", version=2)
    control.add_schedule("s", "echo", cron="0 3 * * *", tz="Europe/Paris", force=True)
    history = control.schedule_history("s")
    first, second, third = (row_at(history, v) for v in (1, 2, 4))
    assert row_at(history, 3) is None and row_at(history, 5) is None
    assert first is not None and second is not None and third is not None
    one, two, four = from_row(first), from_row(second), from_row(third)
    assert (one.every, one.args, dict(one.kwargs), one.description) == (60, (1,), {}, "d")
    assert (two.every, two.args, dict(two.kwargs), two.version) == (60, (2,), {"k": 1}, 2)
    assert (four.every, four.cron, four.tz, four.args, four.description, four.version) == (
        None, "0 3 * * *", "Europe/Paris", (), "", 4,
    )  # fmt: skip
    assert two.updated_at == history[1].at and two.created_at == history[0].at
    assert four.created_at == history[3].at  # added again: created anew


def test_relay_runs_shows_the_schedule_version_of_a_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    backend = open_backend(url)
    assert backend.capability == "lease"
    for index, version in enumerate((3, None)):
        slot = from_ms(1_800_000_000_000 + index * 60_000)
        backend.acquire(AcquireRequest("s", slot, "me:1", 30, schedule_version=version))
    backend.close()
    env = {"COLUMNS": "200"}
    table = CliRunner().invoke(main, ["runs", "--backend", url], env=env).output
    assert "version" in table.splitlines()[2] and " v3 " in table
    listed = json.loads(CliRunner().invoke(main, ["runs", "--backend", url, "--json"]).output)
    assert [r["schedule_version"] for r in listed] == [None, 3]
    code = f"sqlite:///{tmp_path / 'code.db'}"
    other = open_backend(code)
    other.acquire(AcquireRequest("c", from_ms(1_800_000_000_000), "me:1", 30))  # type: ignore[union-attr]
    other.close()
    assert "version" not in CliRunner().invoke(main, ["runs", "--backend", code], env=env).output


def test_each_instances_retention_prunes_removed_schedules_never_disabled_ones(
    store: SQLiteLeaseBackend, clock: FakeClock
) -> None:
    control = Control(store)
    clock.advance_to(at(0))
    control.add_schedule("gone", "echo", every=60, force=True)
    control.remove_schedule("gone")
    control.add_schedule("off", "echo", every=60, enabled=False, force=True)
    host = Host(store, clock, "a", ("echo",))
    host.decider.retention, host.decider.prune_every = 3600, 0
    host.decider.sweep()
    assert len(store.schedule_history("gone")) == 2  # removed within the retention: kept
    clock.advance_to(at(3601))
    host.decider.sweep()
    assert store.schedule_history("gone") == [] and store.stored_schedule("gone") is None
    assert control.schedule("off").enabled is False and len(control.schedule_history("off")) == 1

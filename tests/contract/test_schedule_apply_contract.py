"""Applying a file of stored schedules is all or nothing, on every lease backend.

Through :mod:`relay.schedule_files` (what ``relay schedules apply`` calls) and the store's
``apply_schedules``: every entry is checked before anything is written, a refusal names the
entry's position and name, and the changes land in one atomic step with consecutive revisions.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from relay import ConfigurationError, Conflict, Control, LeaseBackend, UnknownSchedule, open_backend
from relay import schedule_files as files
from relay.health import InstanceInfo
from relay.schedule_store import ScheduleStore, ScheduleWrite, stores_schedules

UTC = timezone.utc


@pytest.fixture
def backend(lease_url: str) -> Iterator[LeaseBackend]:
    opened = open_backend(lease_url)
    yield opened
    opened.close()


@pytest.fixture
def control(backend: LeaseBackend) -> Control:
    """A store with a live instance allowing task ``echo``, and a code-defined job ``nightly``."""
    info = InstanceInfo(
        "host:1", "scheduler", "host", 1, datetime.now(UTC), "0", 10.0, tasks=("echo",)
    )
    backend.record_instance(info, 600)
    backend.register_jobs({"nightly": ""})
    return Control(backend)


def store_of(backend: LeaseBackend) -> ScheduleStore:
    assert stores_schedules(backend)
    return backend


def five(third: dict[str, Any]) -> list[dict[str, Any]]:
    items = [{"name": f"s{n}", "task": "echo", "every": 60} for n in range(1, 6)]
    items[2] = {"name": "s3", "task": "echo", **third}
    return items


REFUSALS = {
    "an at in the past": ({"at": "2001-01-01T00:00:00Z"}, "is not in the future"),
    "a code job's name": ({"name": "nightly", "every": 60}, "code-defined job"),
    "a task no live instance allows": ({"task": "nobody", "every": 60}, "no live instance"),
    "a bad cron": ({"cron": "61 * * * *"}, "cron"),
    "an unknown field": ({"every": 60, "colour": "red"}, "unknown field"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refused_third_entry_writes_nothing_and_is_named(
    backend: LeaseBackend, control: Control, case: str
) -> None:
    third, words = REFUSALS[case]
    items = five(third)
    with pytest.raises(ConfigurationError) as refused:
        files.apply(control, files.plan(control, items))
    name = items[2]["name"]
    assert f"entry 3 (schedule {name!r})" in str(refused.value) and words in str(refused.value)
    assert control.schedules() == []
    assert store_of(backend).schedule_changes(0) == []
    assert all(not store_of(backend).schedule_history(f"s{n}") for n in (1, 2))


def test_a_refusal_found_at_write_time_writes_nothing(
    backend: LeaseBackend, control: Control
) -> None:
    control.add_schedule("s4", "echo", every=60)
    control.add_schedule("old", "echo", every=60)
    items = five({"every": 60})
    items[3] = {"name": "s4", "task": "echo", "every": 30}
    steps = files.plan(control, items, prune=True)
    assert [s.name for s, _ in steps.update] == ["s4"] and steps.remove == ["old"]
    control.update_schedule("s4", version=1, every=45)  # changed after the plan read it
    since = store_of(backend).schedule_changes(0)[-1].revision
    with pytest.raises(Conflict) as refused:
        files.apply(control, steps)
    assert "entry 4 (schedule 's4')" in str(refused.value)
    assert "nothing was written" in str(refused.value)
    assert store_of(backend).schedule_changes(since) == []
    assert sorted(s.name for s in control.schedules()) == ["old", "s4"]


def test_a_file_is_applied_in_one_step_with_consecutive_revisions(
    backend: LeaseBackend, control: Control
) -> None:
    store = store_of(backend)
    control.add_schedule("keep", "echo", every=60)
    control.add_schedule("change", "echo", every=60)
    control.add_schedule("drop", "echo", every=60)
    control.add_schedule("again", "echo", every=60)
    control.remove_schedule("again")
    since = store.schedule_changes(0)[-1].revision
    items = [
        {"name": "keep", "task": "echo", "every": 60},
        {"name": "change", "task": "echo", "every": 30},
        {"name": "again", "task": "echo", "cron": "0 3 * * *"},
        {"name": "new", "task": "echo", "every": 90},
    ]
    steps = files.plan(control, items, prune=True)
    files.apply(control, steps, by="ci@git")
    rows = store.schedule_changes(since)
    assert [r.revision for r in rows] == list(range(since + 1, since + 5))
    assert {r.name: (r.version, r.definition is None) for r in rows} == {
        "change": (2, False), "again": (3, False), "new": (1, False), "drop": (2, True)
    }  # fmt: skip
    assert len({r.updated_at for r in rows}) == 1 and {r.updated_by for r in rows} == {"ci@git"}
    assert sorted(s.name for s in control.schedules()) == ["again", "change", "keep", "new"]
    assert [c.action for c in control.schedule_history("again")] == ["add", "remove", "add"]
    assert control.schedule("change").every == 30
    again = files.plan(control, items, prune=True)
    assert again.summary() == [] and sorted(again.unchanged) == sorted(i["name"] for i in items)


def test_the_store_checks_every_write_before_it_writes_any(
    backend: LeaseBackend, control: Control
) -> None:
    store = store_of(backend)
    control.add_schedule("taken", "echo", every=60)
    since = store.schedule_changes(0)[-1].revision
    fresh = ScheduleWrite("add", "fresh", '{"every": 60}', "{}")
    refused: list[tuple[ScheduleWrite, type[Exception]]] = [
        (ScheduleWrite("add", "taken", '{"every": 60}', "{}"), Conflict),
        (ScheduleWrite("update", "taken", '{"every": 5}', "{}", version=7), Conflict),
        (ScheduleWrite("remove", "taken", None, "{}", version=2), Conflict),
        (ScheduleWrite("update", "missing", '{"every": 5}', "{}", version=1), UnknownSchedule),
        (ScheduleWrite("remove", "missing", None, "{}", version=1), UnknownSchedule),
    ]
    for write, error in refused:
        with pytest.raises(error) as raised:
            store.apply_schedules([fresh, write], "ann")
        assert repr(write.name) in str(raised.value)
        assert store.schedule_changes(since) == []
    store.apply_schedules([], "ann")
    assert store.schedule_changes(since) == []


def test_a_large_file_is_applied_at_once(backend: LeaseBackend, control: Control) -> None:
    store = store_of(backend)
    items = [{"name": f"n{n:05}", "task": "echo", "every": 60} for n in range(3000)]
    files.apply(control, files.plan(control, items))
    rows = store.schedule_changes(0)
    assert [r.name for r in rows] == [i["name"] for i in items]
    assert [r.revision for r in rows] == list(range(1, 3001))
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    items[1500] = {"name": "n01500", "task": "echo", "at": future}
    items.append({"name": "nightly", "task": "echo", "every": 60})
    with pytest.raises(ConfigurationError, match=r"entry 3001 \(schedule 'nightly'\)"):
        files.apply(control, files.plan(control, items))
    assert store.schedule_changes(3000) == []

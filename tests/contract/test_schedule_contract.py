"""Stored schedules on every lease backend: versions, conflicts, history and the revision feed.

Through :class:`relay.Control` and the :mod:`relay.schedule_store` protocol alone. Races between
writers are real processes; claim backends refuse, naming the lease backends.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from itertools import pairwise

import pytest

from relay import (
    ConfigurationError,
    Conflict,
    Control,
    LeaseBackend,
    UnknownSchedule,
    UnsupportedOption,
    open_backend,
)
from relay.health import InstanceInfo
from relay.schedule_store import ScheduleStore, stores_schedules

UTC = timezone.utc


@pytest.fixture
def backend(lease_url: str) -> Iterator[LeaseBackend]:
    opened = open_backend(lease_url)
    assert opened.capability == "lease"
    yield opened
    opened.close()


@pytest.fixture
def control(backend: LeaseBackend) -> Control:
    return Control(backend)


def store_of(backend: LeaseBackend) -> ScheduleStore:
    assert stores_schedules(backend)
    return backend


def test_add_reads_back_at_version_1_stamped_by_the_store(
    backend: LeaseBackend, control: Control
) -> None:
    before = backend.now()
    added = control.add_schedule(
        "report", "send_report", cron="0 3 * * *", tz="Europe/Paris", args=[1, "x"],
        kwargs={"to": "ops"}, options={"queue": "low"}, description="nightly", by="ann@desk",
        force=True,
    )  # fmt: skip
    after = backend.now()
    assert added.version == 1 and added.updated_by == "ann@desk"
    assert added.updated_at is not None
    assert before - timedelta(seconds=1) <= added.updated_at <= after + timedelta(seconds=1)
    read = control.schedule("report")
    assert read == added
    assert read.args == (1, "x") and read.kwargs == {"to": "ops"} and read.tz == "Europe/Paris"
    assert [s.name for s in control.schedules()] == ["report"]


def test_a_second_add_of_a_name_conflicts_and_writes_nothing(control: Control) -> None:
    control.add_schedule("a", "t", every=60, by="ann", force=True)
    with pytest.raises(Conflict, match=r"exists already.*version 1.*by ann") as caught:
        control.add_schedule("a", "t", every=30, force=True)
    assert caught.value.version == 1 and caught.value.by == "ann"
    assert control.schedule("a").every == 60
    assert len(control.schedule_history("a")) == 1


def test_update_compares_versions_and_names_the_current_one(control: Control) -> None:
    control.add_schedule("a", "t", every=60, force=True)
    second = control.update_schedule("a", version=1, every=30, by="bob")
    assert second.version == 2 and second.every == 30 and second.updated_by == "bob"
    with pytest.raises(Conflict, match=r"at version 2.*by bob.*not 1") as caught:
        control.update_schedule("a", version=1, every=10, by="eve")
    assert (caught.value.version, caught.value.by, caught.value.expected) == (2, "bob", 1)
    assert caught.value.at == second.updated_at
    assert control.schedule("a").every == 30
    assert [c.version for c in control.schedule_history("a")] == [1, 2]


def test_a_change_that_changes_nothing_makes_no_version(control: Control) -> None:
    control.add_schedule("a", "t", every=60, force=True)
    same = control.update_schedule("a", version=1, every=timedelta(minutes=1))
    assert same.version == 1 and len(control.schedule_history("a")) == 1


def test_history_records_each_change_with_what_changed(control: Control) -> None:
    control.add_schedule("a", "t", every=60, by="ann", force=True)
    control.update_schedule("a", version=1, enabled=False, by="bob")
    control.update_schedule("a", version=2, cron="*/5 * * * *", by="cat")
    control.remove_schedule("a", version=3, by="dan")
    history = control.schedule_history("a")
    assert [(c.version, c.action, c.by) for c in history] == [
        (1, "add", "ann"), (2, "update", "bob"), (3, "update", "cat"), (4, "remove", "dan"),
    ]  # fmt: skip
    assert history[1].changes == {"enabled": [True, False]}
    assert history[2].changes == {"cron": [None, "*/5 * * * *"], "every": [60.0, None]}
    assert history[0].changes["task"] == [None, "t"]
    assert all(a.at <= b.at for a, b in pairwise(history))


def test_remove_keeps_history_and_a_new_add_continues_the_versions(control: Control) -> None:
    control.add_schedule("a", "t", every=60, force=True)
    with pytest.raises(Conflict):
        control.remove_schedule("a", version=7)
    control.remove_schedule("a")
    assert control.schedules() == []
    with pytest.raises(UnknownSchedule, match=r"no stored schedule named 'a'"):
        control.schedule("a")
    with pytest.raises(UnknownSchedule):
        control.update_schedule("a", version=2, every=5)
    with pytest.raises(UnknownSchedule):
        control.remove_schedule("a")
    again = control.add_schedule("a", "t", every=5, force=True)
    assert again.version == 3
    assert [c.action for c in control.schedule_history("a")] == ["add", "remove", "add"]


def test_the_revision_feed_returns_each_change_once_in_order(backend: LeaseBackend) -> None:
    store = store_of(backend)
    control = Control(backend)
    assert store.schedule_changes(0) == []
    control.add_schedule("a", "t", every=60, force=True)
    control.add_schedule("b", "t", every=60, force=True)
    first = store.schedule_changes(0)
    assert [r.name for r in first] == ["a", "b"]
    assert first[0].revision < first[1].revision
    seen = first[-1].revision
    assert store.schedule_changes(seen) == []  # the idle tick
    control.update_schedule("a", version=1, every=30)
    control.remove_schedule("b")
    changed = store.schedule_changes(seen)
    assert [(r.name, r.version, r.definition is None) for r in changed] == [
        ("a", 2, False), ("b", 2, True),
    ]  # fmt: skip
    assert seen < changed[0].revision < changed[1].revision
    assert store.schedule_changes(changed[-1].revision) == []
    assert [r.name for r in store.schedule_changes(0)] == ["a", "b"]  # removed rows too


def test_a_refused_change_leaves_the_revision_alone(backend: LeaseBackend) -> None:
    store = store_of(backend)
    control = Control(backend)
    control.add_schedule("a", "t", every=60, force=True)
    (row,) = store.schedule_changes(0)
    with pytest.raises(Conflict):
        control.update_schedule("a", version=5, every=1)
    with pytest.raises(Conflict):
        control.add_schedule("a", "t", every=1, force=True)
    assert store.schedule_changes(row.revision) == []
    control.update_schedule("a", version=1, every=1)
    (after,) = store.schedule_changes(row.revision)
    assert after.version == 2


def test_the_task_must_be_allowed_by_a_live_instance(
    backend: LeaseBackend, control: Control
) -> None:
    with pytest.raises(ConfigurationError, match=r"no instance is live.*@scheduler.task\('t'\)"):
        control.add_schedule("a", "t", every=60)
    info = InstanceInfo("i1", "scheduler", "h", 1, datetime.now(UTC), "0", 10.0, tasks=("t", "u"))
    backend.record_instance(info, 60)
    with pytest.raises(ConfigurationError, match=r"allow: t, u"):
        control.add_schedule("a", "other", every=60)
    assert control.add_schedule("a", "t", every=60).version == 1
    with pytest.raises(ConfigurationError, match=r"no live instance allows task 'v'"):
        control.update_schedule("a", version=1, task="v")
    assert control.update_schedule("a", version=1, task="v", force=True).task == "v"


def test_a_code_jobs_name_is_refused(backend: LeaseBackend, control: Control) -> None:
    backend.register_jobs({"nightly": '{"every": 60}'})
    with pytest.raises(ConfigurationError, match=r"'nightly' is the name of a code-defined job"):
        control.add_schedule("nightly", "t", every=60, force=True)


def test_claim_backends_refuse_naming_the_lease_backends(claim_url: str) -> None:
    with Control(claim_url) as control:
        with pytest.raises(UnsupportedOption, match=r"add_schedule.*sqlite:///.*postgresql://"):
            control.add_schedule("a", "t", every=60, force=True)
        with pytest.raises(UnsupportedOption, match=r"schedules"):
            control.schedules()


def _update(url: str, start: multiprocessing.synchronize.Event, out: object) -> None:
    with Control(url) as control:
        start.wait(30)
        try:
            control.update_schedule("race", version=1, args=[multiprocessing.current_process().pid])
            out.put("won")  # type: ignore[attr-defined]
        except Conflict:
            out.put("conflict")  # type: ignore[attr-defined]


def _add(url: str, start: multiprocessing.synchronize.Event, out: object) -> None:
    with Control(url) as control:
        start.wait(30)
        try:
            control.add_schedule("fresh", "t", every=60, force=True)
            out.put("won")  # type: ignore[attr-defined]
        except Conflict:
            out.put("conflict")  # type: ignore[attr-defined]


@pytest.mark.parametrize("step", [_update, _add], ids=["update", "add"])
def test_racing_processes_make_one_change(lease_url: str, step: object) -> None:
    with Control(lease_url) as control:
        control.add_schedule("race", "t", every=60, force=True)
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=step, args=(lease_url, start, out)) for _ in range(4)]  # type: ignore[arg-type]
    for proc in procs:
        proc.start()
    try:
        start.set()
        results = sorted(out.get(timeout=60) for _ in procs)
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    assert results == ["conflict", "conflict", "conflict", "won"]
    with Control(lease_url) as control:
        if step is _update:
            assert [c.version for c in control.schedule_history("race")] == [1, 2]
        else:
            assert [c.version for c in control.schedule_history("fresh")] == [1]

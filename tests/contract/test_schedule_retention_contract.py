"""Retention of stored schedules on every lease backend (issue 24, "Remove"): a removed schedule
stays visible, with its history, until retention prunes it; a disabled one is never pruned."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from relay import Control, LeaseBackend, open_backend
from relay.schedule_store import ScheduleStore, stores_schedules
from tests.support.waiting import wait_until

HOUR = 3600.0


@pytest.fixture
def backend(lease_url: str) -> Iterator[LeaseBackend]:
    opened = open_backend(lease_url)
    assert opened.capability == "lease"
    yield opened
    opened.close()


def store_of(backend: LeaseBackend) -> ScheduleStore:
    assert stores_schedules(backend)
    return backend


def test_prune_deletes_only_schedules_removed_before_the_horizon(backend: LeaseBackend) -> None:
    store, control = store_of(backend), Control(backend)
    control.add_schedule("gone", "t", every=60, force=True)
    control.update_schedule("gone", version=1, every=30)
    control.remove_schedule("gone", version=2)
    control.add_schedule("paused", "t", every=60, enabled=False, force=True)
    control.add_schedule("live", "t", every=60, force=True)
    removed_at = control.schedule_history("gone")[-1].at
    assert store.prune_schedules(HOUR) == 0  # removed less than an hour ago: still visible
    assert [c.version for c in control.schedule_history("gone")] == [1, 2, 3]
    wait_until(lambda: backend.now() > removed_at, "the store's clock passes the removal")
    assert store.prune_schedules(0) == 1
    assert store.schedule_history("gone") == []
    assert store.stored_schedule("gone") is None
    assert "gone" not in {r.name for r in store.schedule_changes(0)}
    assert sorted(s.name for s in control.schedules()) == ["live", "paused"]
    assert (
        len(control.schedule_history("paused")) == 1 and len(control.schedule_history("live")) == 1
    )
    assert store.prune_schedules(0) == 0
    again = control.add_schedule("gone", "t", every=60, force=True)
    assert again.version == 1 and [c.action for c in control.schedule_history("gone")] == ["add"]


def test_prune_takes_a_bounded_batch_and_control_prune_takes_them_all(
    backend: LeaseBackend,
) -> None:
    store, control = store_of(backend), Control(backend)
    for n in range(5):
        control.add_schedule(f"s{n}", "t", every=60, force=True)
        control.remove_schedule(f"s{n}")
    last = control.schedule_history("s4")[-1].at
    wait_until(lambda: backend.now() > last, "the store's clock passes the removals")
    assert store.prune_schedules(0, limit=2) == 2
    assert control.prune(HOUR) == 0 and len(store.schedule_changes(0)) == 3  # not old enough
    control.prune(0)
    assert store.schedule_changes(0) == []
    assert all(store.schedule_history(f"s{n}") == [] for n in range(5))


def test_a_schedule_added_again_after_its_removal_is_not_pruned(backend: LeaseBackend) -> None:
    store, control = store_of(backend), Control(backend)
    control.add_schedule("back", "t", every=60, force=True)
    control.remove_schedule("back")
    control.add_schedule("back", "t", every=30, force=True)
    last = control.schedule_history("back")[-1].at
    wait_until(lambda: backend.now() > last, "the store's clock passes the changes")
    assert store.prune_schedules(0) == 0
    assert control.schedule("back").version == 3
    assert [c.version for c in control.schedule_history("back")] == [1, 2, 3]

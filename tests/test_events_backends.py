"""Every lease backend's records tell a takeover, a retry and a picked-up hand-over apart.

The sweep reports how it won a run from the record ``reclaimable()`` returned before the acquire:
running with an expired lease, pending with reason ``released``, or pending after a failure.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

from relay.contract import LeaseBackend
from relay.engine import Decider, Runner
from relay.events import Event, EventBus, RunPickedUp, RunRetried, RunTakenOver
from relay.jobs import make_job
from relay.schedules import EverySchedule

EVERY = 10**8


def won_now(store: LeaseBackend, owner: str, seen: list[Event], lease: float = 30) -> Any:
    """A decider of one job whose only due run is won by its first tick (the slot before it is
    recorded, so the job has history to catch up from)."""
    bus = EventBus(log=False)
    bus.on(Event, seen.append)
    decider = Decider(store, owner=owner, lease=lease, events=bus)
    decider.add(make_job(store, name="job", every=EVERY, catch_up=EVERY, max_attempts=3))
    latest = EverySchedule(EVERY).latest_slot(datetime.now(timezone.utc))
    assert latest is not None
    store.skip("job", latest - timedelta(seconds=EVERY), "seeded")
    return decider


def runner(store: LeaseBackend, owner: str, seen: list[Event]) -> Runner:
    bus = EventBus(log=False)
    bus.on(Event, seen.append)
    return Runner(store, owner=owner, lease=30, heartbeat=3600, events=bus)


def test_a_hand_over_is_picked_up(lease_backend: LeaseBackend) -> None:
    seen: list[Event] = []
    decider = won_now(lease_backend, "a", seen)
    [won] = decider.tick()
    active = runner(lease_backend, "a:worker", seen).begin(won.run)
    assert active is not None
    active.release()
    decider.sweep()
    [picked] = [e for e in seen if isinstance(e, RunPickedUp)]
    assert (picked.previous_owner, picked.previous_attempt, picked.attempt) == ("a:worker", 1, 2)
    assert not [e for e in seen if isinstance(e, (RunRetried, RunTakenOver))]


def test_a_failed_attempt_is_retried(lease_backend: LeaseBackend) -> None:
    seen: list[Event] = []
    decider = won_now(lease_backend, "a", seen)
    [won] = decider.tick()
    runner(lease_backend, "a:worker", seen).execute(won.run, lambda run: 1 / 0, max_attempts=3)
    decider.sweep()
    [retried] = [e for e in seen if isinstance(e, RunRetried)]
    assert (retried.attempt, retried.max_attempts) == (2, 3)
    assert not [e for e in seen if isinstance(e, (RunPickedUp, RunTakenOver))]


def test_an_expired_lease_is_taken_over(lease_backend: LeaseBackend) -> None:
    seen: list[Event] = []
    decider = won_now(lease_backend, "a", seen, lease=1)
    [won] = decider.tick()
    Runner(lease_backend, owner="dead", lease=1, heartbeat=3600).begin(won.run)
    time.sleep(1.5)  # the store's clock decides the lease expired
    decider.sweep()
    [taken] = [e for e in seen if isinstance(e, RunTakenOver)]
    assert (taken.previous_owner, taken.previous_attempt, taken.attempt) == ("dead", 1, 2)
    assert not [e for e in seen if isinstance(e, (RunPickedUp, RunRetried))]

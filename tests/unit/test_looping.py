"""The engine's loop step, driven by one injected clock: tick, sweep cadence, back-off, reports."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from relay import BackendUnavailable, RunState
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.engine import MAX_BACKOFF, Decider, Loop, Won
from relay.events import (
    Event,
    EventBus,
    RunDispatched,
    RunHandedOver,
    RunWon,
    StoreRecovered,
    StoreUnavailable,
)
from relay.jobs import make_job
from relay.testing import FakeClock

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc).timestamp()


class Clock(FakeClock):
    """The test kit's fake clock from T0, moved by hand (nothing is driven)."""

    def __init__(self) -> None:
        super().__init__(T0)


class Store:
    """A SQLite store that can be switched off, and counts the calls made to it."""

    def __init__(self, inner: SQLiteLeaseBackend) -> None:
        self.inner, self.down, self.calls = inner, False, 0
        self.names: list[str] = []
        self.capability = inner.capability

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            self.names.append(name)
            if self.down:
                raise BackendUnavailable("store is down (test)")
            return attribute(*args, **kwargs)

        return call


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Iterator[Store]:
    inner = SQLiteLeaseBackend(tmp_path / "relay.db", clock=clock)
    yield Store(inner)
    inner.close()


def loop(store: Store, clock: Clock, seen: list[Event], every: float = 60) -> Loop:
    bus = EventBus(log=False)
    bus.on(Event, seen.append)
    decider = Decider(store, owner="me", lease=30, clock=clock, events=bus)  # type: ignore[arg-type]
    decider.add(make_job(store, name="job", every=every))  # type: ignore[arg-type]
    return Loop(decider, interval=5, sweep_every=10, monotonic=clock)


def sent(into: list[Won]) -> Any:
    def send(won: Won) -> bool:
        into.append(won)
        return True

    return send


def test_a_step_decides_dispatches_and_reports(store: Store, clock: Clock) -> None:
    seen: list[Event] = []
    dispatched: list[Won] = []
    step = loop(store, clock, seen).step(sent(dispatched))
    assert [w.run.id for w in step.won] == ["job@2026-11-29T12:00:00Z"]
    assert dispatched == step.won and step.healthy
    assert [type(e) for e in seen] == [RunWon, RunDispatched]
    assert step.next_in == 5  # the interval: the next slot is a minute away, the sweep 10 s


def test_steps_ask_the_store_nothing_until_a_slot_or_a_sweep_is_due(
    store: Store, clock: Clock
) -> None:
    seen: list[Event] = []
    looped = loop(store, clock, seen)
    [won] = looped.step(sent([])).won
    store.inner.finish(won.run.id, won.run.token, succeeded=True)
    calls = store.calls
    for _ in range(9):
        clock.advance(1)
        assert looped.step(sent([])).won == []
    assert store.calls == calls  # 9 s: no slot, no sweep
    clock.advance(1)
    looped.step(sent([]))
    assert store.calls == calls + 1  # the sweep, every 10 s (reclaimable)
    clock.advance(45)
    step = looped.step(sent([]))  # 12:00:55: the next slot is 5 s away, the next sweep 5 s
    assert store.calls == calls + 2
    assert step.next_in == pytest.approx(5, abs=0.01)
    clock.advance(5)
    assert [w.run.id for w in looped.step(sent([])).won] == ["job@2026-11-29T12:01:00Z"]


def test_next_in_is_the_next_slot_when_it_comes_before_the_interval(
    store: Store, clock: Clock
) -> None:
    looped = loop(store, clock, [], every=2)
    clock.advance(0.5)
    assert looped.step(sent([])).next_in == pytest.approx(1.5, abs=0.01)


def test_back_off_doubles_up_to_the_maximum_and_reports_the_outage_once(
    store: Store, clock: Clock
) -> None:
    seen: list[Event] = []
    looped = loop(store, clock, seen)
    store.down = True
    delays = []
    for _ in range(9):
        step = looped.step(sent([]))
        assert not step.healthy and step.won == []
        delays.append(step.next_in)
        clock.advance(step.next_in)
    assert delays == [1, 2, 4, 8, 16, MAX_BACKOFF, MAX_BACKOFF, MAX_BACKOFF, MAX_BACKOFF]
    [down] = [e for e in seen if isinstance(e, StoreUnavailable)]
    assert (down.owner, down.retry_in, down.error) == ("me", 1, "store is down (test)")
    store.down = False
    step = looped.step(sent([]))
    assert step.healthy and len(step.won) == 1
    [up] = [e for e in seen if isinstance(e, StoreRecovered)]
    assert up.down_for == pytest.approx(sum(delays))
    assert [type(e) for e in seen].count(StoreUnavailable) == 1


def test_a_step_called_early_while_backing_off_asks_the_store_nothing(
    store: Store, clock: Clock
) -> None:
    looped = loop(store, clock, [])
    store.down = True
    looped.step(sent([]))
    calls = store.calls
    clock.advance(0.5)
    step = looped.step(sent([]))
    assert store.calls == calls and step.next_in == pytest.approx(0.5)
    assert not step.healthy
    assert looped.step(sent([]), force=True).healthy is False  # force tries at once
    assert store.calls > calls


def test_after_an_outage_the_loop_rereads_history_and_sweeps_at_once_taking_nothing_over(
    store: Store, clock: Clock
) -> None:
    seen: list[Event] = []
    looped = loop(store, clock, seen, every=3600)
    looped.step(sent([]))
    store.down = True
    clock.advance(10)
    assert not looped.step(sent([])).healthy  # the sweep found the store down
    store.down = False
    clock.advance(1)
    calls = len(store.names)
    looped.step(sent([]))
    # History forgotten: read again; the jobs registered again (the store may have lost them);
    # and the sweep comes at once, for pending runs only: runners cut off by the outage record
    # their finishes first, for one lease (30 s here).
    assert store.names[calls:] == ["last_slots", "register_jobs", "reclaimable"]
    [up] = [e for e in seen if isinstance(e, StoreRecovered)]
    assert up.takeover_in == 30 and "taken over in 30s" in up.message()
    assert looped.takeover_from == clock() + 30


def test_no_sweep_is_tried_while_the_store_is_failing(store: Store, clock: Clock) -> None:
    looped = loop(store, clock, [], every=3600)
    looped.step(sent([]))
    store.down = True
    clock.advance(10)
    looped.step(sent([]))  # the sweep fails: an outage
    calls = len(store.names)
    for _ in range(5):
        clock.advance(MAX_BACKOFF)
        looped.step(sent([]), force=True)
    assert set(store.names[calls:]) == {"last_slots"}  # the tick probes; no sweep is sent


def test_a_run_that_finished_during_an_outage_is_not_taken_over_in_the_grace(
    store: Store, clock: Clock
) -> None:
    seen: list[Event] = []
    looped = loop(store, clock, seen, every=3600)
    [won] = looped.step(sent([])).won
    store.inner.start(won.run.id, won.run.token, "runner", 30)
    store.down = True  # an outage longer than the lease
    for _ in range(4):
        clock.advance(MAX_BACKOFF)
        looped.step(sent([]))
    store.down = False
    clock.advance(MAX_BACKOFF)
    assert looped.step(sent([])).won == []  # back, in the grace: the expired run is left alone
    # The cut-off runner records its finish within the grace: nothing is left to take over.
    clock.advance(10)
    assert store.inner.finish(won.run.id, won.run.token, succeeded=True) is RunState.SUCCEEDED
    clock.advance(20)
    assert looped.step(sent([])).won == []
    assert [type(e) for e in seen].count(RunWon) == 1


def test_after_the_grace_an_expired_run_is_taken_over(store: Store, clock: Clock) -> None:
    looped = loop(store, clock, [], every=3600)
    [won] = looped.step(sent([])).won
    store.inner.start(won.run.id, won.run.token, "runner", 30)
    store.down = True
    clock.advance(10)
    looped.step(sent([]))
    store.down = False
    clock.advance(MAX_BACKOFF)
    looped.step(sent([]))
    clock.advance(30)  # the runner died in the outage: one lease later its run is taken over
    [again] = looped.step(sent([])).won
    assert again.run.id == won.run.id and again.run.attempt == 2


def test_a_run_that_cannot_be_dispatched_is_handed_back_not_reported_dispatched(
    store: Store, clock: Clock
) -> None:
    seen: list[Event] = []

    def broken(won: Won) -> bool:
        raise ConnectionError("broker went away")

    step = loop(store, clock, seen).step(broken)
    assert len(step.won) == 1
    assert [type(e) for e in seen] == [RunWon, RunHandedOver]
    [record] = store.inner.runs("job")
    assert record.reason == "released"


def test_a_run_the_host_kept_is_not_reported_dispatched(store: Store, clock: Clock) -> None:
    seen: list[Event] = []
    loop(store, clock, seen).step(lambda won: False)
    assert [type(e) for e in seen] == [RunWon]


def test_a_loop_with_a_role_records_the_instances_own_heartbeat(store: Store, clock: Clock) -> None:
    looped = loop(store, clock, [])
    looped.step(sent([]))
    assert store.inner.instances() == []  # no role: nothing recorded
    with_role = Loop(looped.decider, interval=5, sweep_every=10, role="beat", monotonic=clock)
    store.down = True
    with_role.step(sent([]))
    assert store.inner.instances() == []  # the store did not answer: no beat either
    store.down = False
    with_role.step(sent([]), force=True)
    [instance] = store.inner.instances()
    assert (instance.owner, instance.role) == ("me", "beat")


def test_an_unexpected_error_is_logged_and_backed_off_never_raised(
    store: Store, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[Event] = []
    looped = loop(store, clock, seen)

    def broken() -> list[Won]:
        raise KeyError("a bug")

    looped.decider.tick = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="relay.engine"):
        step = looped.step(sent([]))
    assert not step.healthy and step.next_in == 1
    assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [KeyError]
    assert seen == []  # not a store outage: no StoreUnavailable


def test_the_next_step_is_an_interval_after_this_one_started_however_long_it_took(
    store: Store, clock: Clock
) -> None:
    looped = loop(store, clock, [])
    looped.step(sent([]))
    slow_sweep = looped.decider.sweep
    takes = [3.0]

    def sweep(**kwargs: Any) -> list[Won]:
        clock.advance(takes[0])  # a slow sweep, on a loaded store
        return slow_sweep(**kwargs)

    looped.decider.sweep = sweep  # type: ignore[method-assign]
    clock.advance(10)
    step = looped.step(sent([]))
    # 5 s after the step started, not after it ended: a stored schedule changed during the
    # sweep is read 2 s from now, an interval after the last read.
    assert step.next_in == pytest.approx(2, abs=0.01)
    takes[0] = 7.0
    clock.advance(7)
    assert looped.step(sent([])).next_in == 0  # longer than the interval: step again at once

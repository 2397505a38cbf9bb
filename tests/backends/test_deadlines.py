"""Every store call has a deadline: through a proxy whose packets vanish, calls fail in time.

Each network lease backend is opened through :mod:`tests.support.fault_proxy` with a short
``timeout``. In ``drop`` mode (connections stay open, nothing flows, no reset) a call raises
``BackendUnavailable`` within the backend's deadline, and once the path heals the next calls
work: the connection that timed out was not reused half-read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

import relay
from relay import AcquireRequest, BackendUnavailable, ConfigurationError, Outcome, open_backend
from relay.deadlines import DEFAULT_TIMEOUT, Deadline, check_deadline
from relay.engine import Decider
from relay.jobs import Job
from relay.runs import RunState
from relay.schedules import make_schedule
from tests.support.backends import CLAIM_BACKENDS, LEASE_BACKENDS
from tests.support.fault_proxy import FaultProxy, proxied

TIMEOUT = 0.5
NETWORK = [
    pytest.param(name, marks=LEASE_BACKENDS[name][1], id=name)
    for name in ("redis", "postgres", "nats")
]


@pytest.fixture(params=NETWORK)
def through_proxy(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[FaultProxy, Any]]:
    """A lease backend opened through a fault proxy, with ``timeout=0.5``."""
    factory, _ = LEASE_BACKENDS[request.param]
    with factory(tmp_path) as url, proxied(url) as (proxy, near):
        backend = open_backend(f"{near}{'&' if '?' in near else '?'}timeout={TIMEOUT}")
        try:
            yield proxy, backend
        finally:
            proxy.set("pass")
            backend.close()


def acquire(backend: Any, minute: int) -> Outcome:
    slot = datetime(2026, 12, 1, 12, minute, tzinfo=timezone.utc)
    request = AcquireRequest(job="deadline", slot=slot, owner="me", lease=30)
    result: Outcome = backend.acquire(request).outcome
    return result


def works_again(backend: Any, minute: int) -> Outcome:
    """Acquire once the backend connects again (NATS reconnects in the background)."""
    give_up = time.monotonic() + 15
    while True:
        try:
            return acquire(backend, minute)
        except BackendUnavailable:
            assert time.monotonic() < give_up, "the backend never worked again"
            time.sleep(0.2)


def test_a_call_whose_packets_vanish_fails_within_the_deadline_and_the_next_one_works(
    through_proxy: tuple[FaultProxy, Any],
) -> None:
    proxy, backend = through_proxy
    deadline = backend.deadline
    assert isinstance(deadline, Deadline) and deadline.timeout == TIMEOUT and deadline.given
    assert acquire(backend, 0) is Outcome.WON
    proxy.set("drop")
    for minute in (1, 2):  # the open connection, then whatever the backend tries next
        began = time.monotonic()
        with pytest.raises(BackendUnavailable):
            acquire(backend, minute)
        took = time.monotonic() - began
        # Never sooner than the timeout; never later than the stated deadline (with room for a
        # loaded machine).
        assert TIMEOUT * 0.9 <= took < deadline.per_call + 1.5, took
    proxy.set("pass")
    assert works_again(backend, 3) in (Outcome.WON, Outcome.HELD)
    assert acquire(backend, 0) is Outcome.HELD  # the store is the same, and so is the record


def test_a_reset_connection_fails_the_call_at_once(through_proxy: tuple[FaultProxy, Any]) -> None:
    proxy, backend = through_proxy
    assert acquire(backend, 0) is Outcome.WON
    proxy.set("reset")
    began = time.monotonic()
    with pytest.raises(BackendUnavailable):
        acquire(backend, 1)
    assert time.monotonic() - began < backend.deadline.per_call + 1.5
    proxy.set("pass")
    assert works_again(backend, 2) is Outcome.WON


def test_an_acquire_answered_too_late_is_handed_back_at_the_next_sweep(
    through_proxy: tuple[FaultProxy, Any],
) -> None:
    """The store does the acquire; its answer comes after the client gave up (every packet
    delayed 0.35 s each way, timeout 0.5 s). The run is leased to this owner, who does not know
    it: its next sweep reads the run's record, hands it back and leases it again (see
    ``tests/unit/test_unanswered.py``), rather than waiting two leases for a takeover."""
    proxy, backend = through_proxy
    now = [datetime(2026, 12, 1, 11, 59, 30, tzinfo=timezone.utc).timestamp()]
    decider = Decider(backend, owner="a", lease=30, clock=lambda: now[0])
    decider.add(
        Job(name="late", schedule=make_schedule(cron=None, every=60, tz=None), handler=print)
    )
    for won in decider.tick():  # the slot of 11:59: decided, as on a running instance
        backend.finish(won.run.id, won.run.token, succeeded=True)
    now[0] += 60
    proxy.set("delay", delay=0.35)
    with pytest.raises(BackendUnavailable):
        decider.tick()
    proxy.set("pass")
    give_up = time.monotonic() + 15
    while True:
        try:
            (record,) = [r for r in backend.runs("late") if r.id == "late@2026-12-01T12:00:00Z"]
            break
        except (BackendUnavailable, ValueError):  # reconnecting; or the write not visible yet
            assert time.monotonic() < give_up, "the acquire was never done"
            time.sleep(0.2)
    assert (record.state, record.owner) == (RunState.RUNNING, "a")  # a's, and a cannot tell
    (won,) = decider.sweep()  # handed back (never started), then leased again: not 2 leases on
    assert (won.run.id, won.run.attempt, won.run.token > record.token) == (record.id, 1, True)


class _Store:
    capability = "lease"
    name = "Fake (for the check)"

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline


def test_a_timeout_given_longer_than_the_lease_is_refused_naming_the_option() -> None:
    store = _Store(Deadline(timeout=5, per_call=10.5, given=True))
    with pytest.raises(ConfigurationError, match=r"timeout=5\).*lease \(10s\).*timeout=1.59"):
        check_deadline(store, 10)
    check_deadline(store, 11)  # shorter than the lease: fine


def test_the_default_timeout_is_only_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    store = _Store(Deadline(timeout=DEFAULT_TIMEOUT, per_call=4.5, given=False))
    with caplog.at_level(logging.WARNING, logger="relay.backends"):
        check_deadline(store, 3)
    assert "timeout=2, the default" in caplog.text and "Set timeout=" in caplog.text


@pytest.mark.redis
def test_a_scheduler_refuses_a_store_timeout_as_long_as_its_lease(tmp_path: Path) -> None:
    factory, _ = LEASE_BACKENDS["redis"]
    with factory(tmp_path) as url:
        with pytest.raises(ConfigurationError, match="timeout=3"):
            relay.Scheduler(f"{url}&timeout=3", lease=5)
        relay.Scheduler(f"{url}&timeout=1", lease=5).backend.close()


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=CLAIM_BACKENDS[name][1], id=name)
     for name in ("redis-script", "nats-dedup")],
)  # fmt: skip
def test_a_claim_whose_packets_vanish_fails_in_time_and_the_next_one_works(
    name: str, tmp_path: Path
) -> None:
    factory, _ = CLAIM_BACKENDS[name]
    with factory(tmp_path) as url, proxied(url) as (proxy, near):
        backend: Any = open_backend(f"{near}{'&' if '?' in near else '?'}timeout={TIMEOUT}")
        try:
            slot = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
            assert backend.claim("deadline", slot) is True
            proxy.set("drop")
            began = time.monotonic()
            with pytest.raises(BackendUnavailable):
                backend.claim("deadline", slot.replace(minute=1))
            took = time.monotonic() - began
            # A claim sends one request (NATS: publish and wait for its ack, plus 5 s to
            # reconnect if it must); never far past that.
            assert TIMEOUT * 0.9 <= took < TIMEOUT + 5 + 1.5, took
            print(f"\n{name}: a claim failed {took:.2f}s after the drop")
            proxy.set("pass")
            give_up = time.monotonic() + 15
            while True:
                try:
                    assert backend.claim("deadline", slot.replace(minute=2)) is True
                    break
                except BackendUnavailable:
                    assert time.monotonic() < give_up, "the backend never worked again"
                    time.sleep(0.2)
        finally:
            proxy.set("pass")
            backend.close()

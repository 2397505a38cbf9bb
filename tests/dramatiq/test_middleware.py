"""The middleware and @periodic in one process, on Dramatiq's stub broker and a SQLite store.

These check the mapping onto Relay's runner message by message; the concurrency claims (racing
schedulers, killed workers) are proved with real processes in ``test_processes.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import Shutdown, SkipMessage

import relay
import relay_dramatiq
from relay.backends import open_backend
from relay.contract import AcquireRequest, LeaseBackend
from relay.errors import BackendUnavailable, ConfigurationError, InvalidSchedule, UnsupportedOption
from relay.runs import HEADER, Run, RunState, run_to_headers
from relay_dramatiq import RelayMiddleware, Scheduler, current_run, periodic

UTC = timezone.utc
SLOT = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'relay.db'}"


@pytest.fixture
def broker(db: str) -> Iterator[StubBroker]:
    broker = StubBroker()
    broker.add_middleware(RelayMiddleware(db, lease=5, heartbeat=1))
    broker.emit_after("process_boot")
    yield broker
    broker.close()


def middleware_of(broker: StubBroker) -> RelayMiddleware[Any]:
    return next(m for m in broker.middleware if isinstance(m, RelayMiddleware))


def store(broker: StubBroker) -> LeaseBackend:
    backend = middleware_of(broker).backend
    assert backend.capability == "lease"
    return backend


def process(broker: StubBroker) -> None:
    """Work every queued message off with a real (in-process) Dramatiq worker."""
    worker = dramatiq.Worker(broker, worker_timeout=50, worker_threads=1)
    worker.start()
    try:
        for queue in list(broker.queues):
            broker.join(queue, fail_fast=False)
        worker.join()
    finally:
        worker.stop()


def acquire(backend: LeaseBackend, job: str, lease: float = 60) -> Run:
    request = AcquireRequest(job=job, slot=SLOT, owner="scheduler", lease=lease, max_attempts=3)
    result = backend.acquire(request)
    assert result.run is not None, result
    return result.run


def send_run(actor: dramatiq.Actor[Any, Any], run: Run) -> None:
    actor.send_with_options(**{HEADER: run_to_headers(run), "max_retries": 0})


# -- creation-time checks --------------------------------------------------------------------


def test_claim_backends_refuse_lease_options(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'claims.db'}?strategy=claim"
    for option in ("lease", "heartbeat", "queue_lease"):
        with pytest.raises(UnsupportedOption, match=option):
            RelayMiddleware(url, **{option: 60})
    assert RelayMiddleware(url).queue_lease == 0.0


def test_lease_options_are_checked_at_creation(db: str) -> None:
    assert RelayMiddleware(db).queue_lease == relay_dramatiq.DEFAULT_QUEUE_LEASE
    with pytest.raises(ConfigurationError, match="queue_lease"):
        RelayMiddleware(db, lease=60, queue_lease=30)
    with pytest.raises(ConfigurationError, match="heartbeat"):
        RelayMiddleware(db, lease=10, heartbeat=10)


def test_periodic_needs_the_middleware_on_the_broker() -> None:
    bare = StubBroker()
    with pytest.raises(ConfigurationError, match="no RelayMiddleware"):
        periodic(every=60)(dramatiq.actor(broker=bare)(lambda: None))


def test_periodic_refuses_required_arguments(broker: StubBroker) -> None:
    def needs(x: int, y: int = 1) -> None: ...

    with pytest.raises(ConfigurationError, match="required argument"):
        periodic(every=60)(dramatiq.actor(broker=broker)(needs))


def test_periodic_refuses_dramatiq_retries(broker: StubBroker) -> None:
    def retried() -> None: ...

    with pytest.raises(ConfigurationError, match="max_retries"):
        periodic(every=60)(dramatiq.actor(broker=broker, max_retries=3)(retried))


def test_periodic_checks_options_against_the_backend(tmp_path: Path) -> None:
    claims = StubBroker()
    claims.add_middleware(RelayMiddleware(f"sqlite:///{tmp_path / 'c.db'}?strategy=claim"))

    def job() -> None: ...

    with pytest.raises(UnsupportedOption, match="overlap"):
        periodic(every=60, overlap="skip")(dramatiq.actor(broker=claims)(job))
    with pytest.raises(InvalidSchedule):
        periodic(cron="not a cron")(dramatiq.actor(broker=claims, actor_name="job2")(job))


# -- the worker half -------------------------------------------------------------------------


def test_a_run_message_runs_once_with_its_run(broker: StubBroker) -> None:
    seen: list[Run | None] = []

    @dramatiq.actor(broker=broker)
    def job() -> None:
        seen.append(current_run())
        assert relay.current_run() is current_run()  # one current run, core and integration

    run = acquire(store(broker), "job")
    send_run(job, run)
    send_run(job, run)  # a duplicate delivery of a finished run
    process(broker)
    assert len(seen) == 1 and seen[0] is not None
    assert (seen[0].id, seen[0].token) == (run.id, run.token)
    assert store(broker).runs("job")[0].state is RunState.SUCCEEDED
    assert current_run() is None


def test_a_stale_token_is_dropped(broker: StubBroker) -> None:
    tokens: list[int] = []

    @dramatiq.actor(broker=broker)
    def job() -> None:
        run = current_run()
        assert run is not None
        tokens.append(run.token)

    backend = store(broker)
    old = acquire(backend, "job")
    backend.release(old.id, old.token)
    new = acquire(backend, "job")
    send_run(job, old)
    send_run(job, new)
    process(broker)
    assert tokens == [new.token] and new.token > old.token


def test_plain_messages_pass_through(broker: StubBroker) -> None:
    seen: list[Run | None] = []

    @periodic(every=3600)
    @dramatiq.actor(broker=broker)
    def plain(x: int = 0) -> None:
        seen.append(current_run())

    plain.send(1)
    process(broker)
    assert seen == [None]


def test_a_failed_run_is_retried_by_relay_not_dramatiq(broker: StubBroker) -> None:
    calls: list[int] = []

    @periodic(every=3600, catch_up=3600, max_attempts=2)
    @dramatiq.actor(broker=broker)
    def failing() -> None:
        run = current_run()
        assert run is not None
        calls.append(run.attempt)
        raise RuntimeError("boom")

    items = [p for p in relay_dramatiq.periodic_actors() if p.actor is failing]
    scheduler = Scheduler(items)
    for _ in range(2):
        scheduler.run_pending()  # dispatches attempt 1, then the sweep dispatches attempt 2
        process(broker)
        scheduler._groups[id(middleware_of(broker))].loop.next_sweep = 0.0
    assert calls == [1, 2]
    [record] = store(broker).runs("failing")
    assert (record.state, record.failures) == (RunState.FAILED, 2)
    # Dramatiq gave up on each message at once (max_retries=0): dead-lettered, never re-sent.
    assert len(broker.dead_letters) == 2
    assert all(m.options["retries"] == 1 for m in broker.dead_letters)


def test_a_shutdown_hands_the_run_over(broker: StubBroker) -> None:
    @dramatiq.actor(broker=broker)
    def interrupted() -> None:
        raise Shutdown("worker stopping")

    run = acquire(store(broker), "interrupted")
    send_run(interrupted, run)
    process(broker)
    [record] = store(broker).runs("interrupted")
    assert (record.state, record.failures, record.reason) == (RunState.PENDING, 0, "released")


class FailingStart:
    """A lease backend whose ``start`` fails the way a store or a bug would."""

    def __init__(self, backend: LeaseBackend, error: Exception) -> None:
        self._backend = backend
        self._error = error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def start(self, *args: Any) -> Run:
        raise self._error


@pytest.mark.parametrize("error", [BackendUnavailable("store down"), RuntimeError("a bug")])
def test_a_failing_hook_skips_the_run_and_keeps_the_worker(db: str, error: Exception) -> None:
    backend = open_backend(db)
    assert backend.capability == "lease"
    broker = StubBroker()
    broker.add_middleware(RelayMiddleware(FailingStart(backend, error), lease=5))  # type: ignore[call-overload]
    broker.emit_after("process_boot")
    calls: list[str] = []

    @dramatiq.actor(broker=broker)
    def job(tag: str = "run") -> None:
        calls.append(tag)

    send_run(job, acquire(backend, "job"))
    job.send("plain")
    process(broker)
    assert calls == ["plain"]
    assert backend.runs("job")[0].state is RunState.RUNNING  # left to expire and be taken over
    broker.close()


def test_malformed_run_option_is_skipped(broker: StubBroker) -> None:
    calls: list[int] = []

    @dramatiq.actor(broker=broker)
    def job() -> None:
        calls.append(1)

    job.send_with_options(**{HEADER: {"id": "nonsense"}})
    process(broker)
    assert calls == []


class SkipAfterRelay(dramatiq.Middleware):
    """A middleware placed after Relay's that skips, or fails, every message."""

    def __init__(self, skip: bool) -> None:
        self.skip = skip

    def before_process_message(self, broker: dramatiq.Broker, message: Any) -> None:
        if self.skip:
            raise SkipMessage("not today")
        message.fail()


@pytest.mark.parametrize("skip", [True, False], ids=["skipped", "failed"])
def test_a_later_middleware_refusing_the_message_fails_the_attempt(
    broker: StubBroker, skip: bool
) -> None:
    broker.add_middleware(SkipAfterRelay(skip))
    calls: list[int] = []

    @dramatiq.actor(broker=broker)
    def job() -> None:
        calls.append(1)

    send_run(job, acquire(store(broker), "job"))
    process(broker)
    assert calls == []
    [record] = store(broker).runs("job")
    assert (record.state, record.failures) == (RunState.PENDING, 1)


def test_the_public_surface() -> None:
    assert set(relay_dramatiq.__all__) == {
        "DEFAULT_QUEUE_LEASE", "MESSAGE_OPTIONS", "Periodic", "RelayMiddleware", "Scheduler",
        "current_run", "periodic", "periodic_actors", "schedulable", "schedulable_actors",
    }  # fmt: skip


# -- the deciding half, one tick at a time -----------------------------------------------------


class DownBroker(StubBroker):
    """A broker whose enqueue fails, as a broker that went away does."""

    def enqueue(self, message: Any, *, delay: int | None = None) -> Any:
        raise ConnectionError("broker went away")


def test_a_run_that_cannot_be_enqueued_is_handed_over(db: str) -> None:
    broker = DownBroker()
    broker.add_middleware(RelayMiddleware(db, lease=5))

    @periodic(every=3600, catch_up=3600)
    @dramatiq.actor(broker=broker)
    def unsent() -> None: ...

    scheduler = Scheduler([p for p in relay_dramatiq.periodic_actors() if p.actor is unsent])
    assert scheduler.run_pending() is True
    [record] = store(broker).runs("unsent")
    assert (record.state, record.reason, record.failures) == (RunState.PENDING, "released", 0)
    broker.close()


class DownStore:
    """A lease backend whose store stopped answering."""

    def __init__(self, backend: LeaseBackend) -> None:
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def acquire_many(self, requests: Any) -> Any:
        raise BackendUnavailable("store down")

    def last_slot(self, job: str) -> Any:
        raise BackendUnavailable("store down")

    def last_slots(self, jobs: Any) -> Any:
        raise BackendUnavailable("store down")


def test_a_store_outage_is_survived_and_reported(db: str) -> None:
    backend = open_backend(db)
    assert backend.capability == "lease"
    broker = StubBroker()
    broker.add_middleware(RelayMiddleware(DownStore(backend), lease=5))  # type: ignore[call-overload]

    @periodic(every=3600, catch_up=3600)
    @dramatiq.actor(broker=broker)
    def waiting() -> None: ...

    scheduler = Scheduler([p for p in relay_dramatiq.periodic_actors() if p.actor is waiting])
    assert scheduler.run_pending() is False
    assert backend.runs("waiting") == []
    assert broker.queues["default"].qsize() == 0
    broker.close()

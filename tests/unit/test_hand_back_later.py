"""A worker's start that the store did not answer is handed back once it answers, on a real SQLite
store.

A wrapper stands for a store cut off from the worker: while :attr:`Down.down`, its ``start`` and
``release`` raise ``BackendUnavailable`` (a start may first be done, its answer lost). Without the
hand-back, the run waited for its lease to run out (the queue lease, up to 300 s by default)
before a sweep took it over. ``tests/celery_integration/test_celery_processes.py`` cuts a real
worker off through a proxy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from relay.backends import open_backend
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.engine import Decider, HandBackLater, Runner
from relay.errors import BackendUnavailable
from relay.jobs import Job
from relay.runs import Run, RunState
from relay.schedules import make_schedule

UTC = timezone.utc
NOW = datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC).timestamp()


class Down:
    """A lease backend whose ``start`` and ``release`` go unanswered while :attr:`down`; a start
    is first done if :attr:`done_first`."""

    def __init__(self, backend: SQLiteLeaseBackend) -> None:
        self.backend = backend
        self.down = False
        self.done_first = False
        self.releases = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def start(self, run_id: str, token: int, owner: str, lease: float) -> Run:
        if not self.down:
            return self.backend.start(run_id, token, owner, lease)
        if self.done_first:
            self.backend.start(run_id, token, owner, lease)
        raise BackendUnavailable("the store did not answer within 0.5s")

    def release(self, run_id: str, token: int) -> None:
        self.releases += 1
        if self.down:
            raise BackendUnavailable("the store did not answer within 0.5s")
        self.backend.release(run_id, token)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteLeaseBackend]:
    backend = SQLiteLeaseBackend.from_url(f"sqlite:///{tmp_path / 'relay.db'}")
    yield backend
    backend.close()


def decider(backend: Any) -> Decider:
    """A scheduler ("beat") that wins the run of 12:00 at its tick, as it publishes it."""
    made = Decider(backend, owner="beat", lease=300, clock=lambda: NOW)
    made.add(Job(name="job", schedule=make_schedule(cron=None, every=60, tz=None), handler=print))
    return made


def worker(down: Down, later: HandBackLater) -> Runner:
    return Runner(down, owner="worker/t1", lease=30, heartbeat=10, unanswered=later)


def cut_off_at_start(
    store: SQLiteLeaseBackend, every: float, keep_trying: float = 300
) -> tuple[Run, Down, HandBackLater]:
    """The run beat won, and a worker's start of it that went unanswered: the run, the store as
    that worker sees it (still down) and its hand-backs."""
    (won,) = decider(store).tick()
    down = Down(store)
    later = HandBackLater(down, keep_trying=keep_trying, every=every)
    down.down = True
    with pytest.raises(BackendUnavailable):
        worker(down, later).begin(won.run)
    return won.run, down, later


def until(what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.parametrize("done_first", [False, True], ids=["never-arrived", "answer-lost"])
def test_an_unanswered_start_is_not_run_and_is_handed_back_once_the_store_answers(
    store: SQLiteLeaseBackend, done_first: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "relay.engine")
    (won,) = decider(store).tick()
    down = Down(store)
    later = HandBackLater(down, keep_trying=300, every=0.05)
    down.down, down.done_first = True, done_first
    called: list[Run] = []
    with pytest.raises(BackendUnavailable):
        worker(down, later).execute(won.run, called.append)
    assert called == []
    until("a few tries while the store is down", lambda: down.releases >= 3)
    (record,) = store.runs("job")
    assert (record.state, record.token) == (RunState.RUNNING, won.run.token)
    assert later.pending() == [won.run.id] and won.run.id in later

    down.down = False
    until("the hand-back", lambda: store.runs("job")[0].state is RunState.PENDING)
    until("nothing left to hand back", lambda: later.pending() == [])
    assert won.run.id not in later
    assert store.runs("job")[0].failures == 0
    assert "handed back now that the store answers" in caplog.text
    (again,) = decider(store).sweep()  # the scheduler's next sweep dispatches it again
    assert again.run.id == won.run.id and again.run.token > won.run.token
    assert worker(down, later).execute(again.run, called.append) is RunState.SUCCEEDED
    assert [run.id for run in called] == [won.run.id]


def test_a_run_delivered_again_and_started_here_is_not_handed_back(
    store: SQLiteLeaseBackend,
) -> None:
    run, down, later = cut_off_at_start(store, every=0.3)
    down.down = False
    active = worker(down, later).begin(run)  # a second delivery, before the next try
    assert active is not None
    assert later.pending() == []
    time.sleep(0.5)  # past the try that would have come
    (record,) = store.runs("job")
    assert (record.state, record.owner, record.token) == (
        RunState.RUNNING,
        "worker/t1",
        run.token,
    )
    assert active.succeed() is RunState.SUCCEEDED


def test_a_run_whose_token_moved_on_is_left_to_its_new_holder(store: SQLiteLeaseBackend) -> None:
    run, down, later = cut_off_at_start(store, every=0.05)
    store.release(run.id, run.token)  # meanwhile the run went on without this worker
    (again,) = decider(store).sweep()
    down.down = False
    until("nothing left to hand back", lambda: later.pending() == [])
    (record,) = store.runs("job")
    assert (record.state, record.token) == (RunState.RUNNING, again.run.token)


def test_it_stops_trying_once_every_lease_of_the_run_has_run_out(
    store: SQLiteLeaseBackend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "relay.engine")
    _, down, later = cut_off_at_start(store, every=0.05, keep_trying=0.3)
    until("giving up", lambda: later.pending() == [])
    tries = down.releases
    assert tries >= 3
    assert "could not be handed back within 0.3s" in caplog.text
    down.down = False
    time.sleep(0.2)
    assert down.releases == tries  # no thread left trying
    assert store.runs("job")[0].state is RunState.RUNNING


def test_a_claim_backend_has_nothing_to_hand_back(tmp_path: Path) -> None:
    claim = open_backend(f"sqlite:///{tmp_path / 'claims.db'}?strategy=claim")
    assert claim.capability == "claim"
    try:
        assert HandBackLater.of(claim, 300) is None
    finally:
        claim.close()

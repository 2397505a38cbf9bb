"""``Run.lost``: made on first access, not with every run, and otherwise as it was: one
``threading.Event`` per run (or the one passed in), shared by ``dataclasses.replace``, left out of
equality and repr, and what ``run.check()`` reads."""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, datetime

import pytest

from relay.errors import LeaseLost
from relay.runs import Run, won_run

SLOT = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def a_run(**given: object) -> Run:
    return Run("nightly@2026-11-30T08:00:00Z", "nightly", SLOT, 1, 7, "beat@host", **given)  # type: ignore[arg-type]


def test_no_event_is_made_until_lost_is_read() -> None:
    run = a_run()
    assert not any(isinstance(v, threading.Event) for v in vars(run).values())
    event = run.lost
    assert isinstance(event, threading.Event) and not event.is_set()
    assert run.lost is event, "every read gives the same event"


def test_threads_reading_lost_at_once_get_one_event() -> None:
    for _ in range(20):
        run, seen = a_run(), []
        barrier = threading.Barrier(8)

        def read(
            run: Run = run, seen: list[threading.Event] = seen, barrier: threading.Barrier = barrier
        ) -> None:
            barrier.wait()
            seen.append(run.lost)

        threads = [threading.Thread(target=read) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len({id(event) for event in seen}) == 1


def test_an_event_passed_in_is_the_runs_and_replace_shares_it() -> None:
    event = threading.Event()
    assert a_run(lost=event).lost is event
    run = a_run()
    assert dataclasses.replace(run, token=8).lost is run.lost


def test_lost_is_left_out_of_equality_and_repr_and_cannot_be_reassigned() -> None:
    run, other = a_run(), a_run()
    run.lost.set()
    assert run == other and "lost" not in repr(run)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.lost = threading.Event()  # type: ignore[misc]


def test_check_raises_once_lost_is_set() -> None:
    run = a_run()
    run.check()
    run.lost.set()
    with pytest.raises(LeaseLost, match="no longer owned"):
        run.check()


def test_won_run_is_the_run_that_run_makes() -> None:
    made = won_run("nightly@2026-11-30T08:00:00Z", "nightly", SLOT, 1, 7, "beat@host", 3)
    given = a_run(schedule_version=3)
    assert made == given and repr(made) == repr(given)
    assert vars(made) == {k: v for k, v in vars(given).items() if k != "_lost"}
    assert {f.name for f in dataclasses.fields(Run)} - {"lost"} <= set(vars(made))
    assert not any(isinstance(v, threading.Event) for v in vars(made).values())
    assert made.lost is made.lost and not made.lost.is_set()
    later = dataclasses.replace(made, token=8)
    assert later.lost is made.lost and later.token == 8 and later.job == "nightly"
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.token = 9  # type: ignore[misc]
    made.lost.set()
    with pytest.raises(LeaseLost):
        made.check()

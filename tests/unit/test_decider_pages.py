"""The decider names at most ``NAMES_PER_CALL`` jobs in one store call that reads their history or
registers them: an instance starting with 100,000 jobs never builds one request for them all."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from relay import AcquireRequest
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.engine import Decider, deciding
from relay.jobs import make_job
from relay.testing import FakeClock


class Recording:
    """Wraps a backend and records the jobs named by each paged call."""

    def __init__(self, inner: SQLiteLeaseBackend) -> None:
        self.inner = inner
        self.capability = inner.capability
        self.pages: dict[str, list[list[str]]] = {"last_slots": [], "register_jobs": []}
        self.down = False

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if name not in self.pages:
            return attribute

        def recorded(jobs: Any) -> Any:
            self.pages[name].append(sorted(jobs))
            if self.down and len(self.pages[name]) == 2:
                raise OSError("down (test)")
            return attribute(jobs)

        return recorded


def test_history_and_registration_are_read_and_written_in_pages(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deciding, "NAMES_PER_CALL", 3)
    store = Recording(clocked_store)
    made = Decider(store, owner="a", lease=30, clock=fake_clock)  # type: ignore[arg-type]
    names = [f"job{n}" for n in range(7)]
    for name in names:
        made.add(make_job(store, name=name, every=60))  # type: ignore[arg-type]
    slot = datetime.fromtimestamp(fake_clock(), timezone.utc)
    assert clocked_store.acquire(AcquireRequest("job5", slot, "b", 30)).run is not None
    won = made.tick()
    # Every job decided once; job5's recorded slot came back in the second page: not due again.
    assert sorted(w.run.job for w in won) == [n for n in names if n != "job5"]
    pages = store.pages["last_slots"]
    assert [len(p) for p in pages] == [3, 3, 1] and sorted(n for p in pages for n in p) == names
    made.sweep()
    pages = store.pages["register_jobs"]
    assert [len(p) for p in pages] == [3, 3, 1] and sorted(n for p in pages for n in p) == names
    assert {j.name for j in clocked_store.jobs()} == set(names)


def test_a_registration_page_that_fails_leaves_the_rest_for_the_next_sweep(
    clocked_store: SQLiteLeaseBackend, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deciding, "NAMES_PER_CALL", 3)
    store = Recording(clocked_store)
    made = Decider(store, owner="a", lease=30, clock=fake_clock)  # type: ignore[arg-type]
    names = [f"job{n}" for n in range(7)]
    for name in names:
        made.add(make_job(store, name=name, every=60))  # type: ignore[arg-type]
    store.down = True
    with pytest.raises(OSError):
        made.sweep()
    first = store.pages["register_jobs"][0]
    store.down = False
    made.sweep()
    again = store.pages["register_jobs"][2:]
    assert sorted(n for p in again for n in p) == sorted(set(names) - set(first))
    assert {j.name for j in clocked_store.jobs()} == set(names)

"""One heartbeat for all the runs of a runner (a store with ``heartbeat_many``: SQLite here):
each run keeps its own rules, as with one heartbeat per run. Real SQLite store, real time; an
outage is another connection holding the write lock (see ``test_lease_lost.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from relay import AcquireRequest, LeaseLost, Outcome, RunState
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.contract import renews_many
from relay.engine import ActiveRun, Decider, Renewals, Runner
from relay.events import Event, FencedOff, RunLeaseLost
from relay.jobs import make_job
from tests.support.waiting import wait_until
from tests.unit.test_lease_lost import LEASE, of, path, runner, seen, store, store_silent

__all__ = ["path", "runner", "seen", "store"]  # the fixtures, shared with test_lease_lost


def begin_two(store: SQLiteLeaseBackend, runner: Runner) -> list[ActiveRun]:
    decider = Decider(store, owner="a", lease=LEASE)
    for name in ("one", "two"):
        decider.add(make_job(store, name=name, every=60))
    begun = [runner.begin(won.run) for won in decider.tick()]
    assert len(begun) == 2 and None not in begun
    return [active for active in begun if active is not None]


def test_through_an_outage_each_run_is_let_go_once(
    path: Path, store: SQLiteLeaseBackend, runner: Runner, seen: list[Event]
) -> None:
    assert renews_many(store)
    actives = begin_two(store, runner)
    with store_silent(path):
        for active in actives:
            assert active.run.lost.wait(10), f"{active.run.id}: run.lost was never set"
    assert sorted(e.run_id for e in of(seen, RunLeaseLost)) == sorted(a.run.id for a in actives)
    # Nobody took them over: each finish still carries its current token, and is recorded.
    assert [active.succeed() for active in actives] == [RunState.SUCCEEDED] * 2
    assert of(seen, FencedOff) == []


def test_a_run_taken_over_is_fenced_off_alone_and_the_other_renewed(
    store: SQLiteLeaseBackend, runner: Runner, seen: list[Event]
) -> None:
    first, second = begin_two(store, runner)
    store.release(first.run.id, first.run.token)  # as if handed over: then another leases it
    request = AcquireRequest(first.run.job, first.run.scheduled_for, "b", LEASE * 10)
    assert store.acquire(request).outcome is Outcome.WON
    wait_until(lambda: first.lost, "the next round finds the newer token")
    [fenced] = of(seen, FencedOff)
    assert isinstance(fenced, FencedOff)
    assert fenced.run_id == first.run.id and fenced.operation == "heartbeat"
    renewed = second.renewed
    wait_until(lambda: second.renewed > renewed, "the other run is renewed again")
    assert not second.run.lost.is_set() and of(seen, RunLeaseLost) == []
    assert second.succeed() is RunState.SUCCEEDED
    assert first.succeed() is None  # fenced off: the newer attempt owns the run


class CountingStore(SQLiteLeaseBackend):
    """The real SQLite store, counting the runs of each ``heartbeat_many``."""

    rounds: list[int]

    def heartbeat_many(self, runs: Any, lease: float) -> list[LeaseLost | None]:
        self.rounds.append(len(runs))
        return super().heartbeat_many(runs, lease)


def test_runners_sharing_renewals_renew_their_runs_in_one_call(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "relay.db")
    store.rounds = []
    renewals = Renewals.of(store)
    assert renewals is not None
    # Two worker threads of one host: each a runner (an owner) of its own, one Renewals.
    runners = [
        Runner(store, owner=f"w:{n}", lease=LEASE * 5, heartbeat=0.2, renewals=renewals)
        for n in range(2)
    ]
    decider = Decider(store, owner="beat", lease=LEASE * 5)
    for name in ("one", "two"):
        decider.add(make_job(store, name=name, every=60))
    actives = [runner.begin(won.run) for runner, won in zip(runners, decider.tick(), strict=True)]
    wait_until(lambda: store.rounds.count(2) >= 2, "two rounds renewing both runs")
    assert store.rounds[-1] == 2, store.rounds  # once together, they stay together
    assert all(active is not None and active.succeed() is RunState.SUCCEEDED for active in actives)
    store.close()

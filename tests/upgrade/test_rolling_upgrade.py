"""A deploy of HEAD over the previous release, on each lease store, with real processes.

Two instances of the previous release run a job every second. A canary of HEAD starts beside them
and is rolled back (stopped, its host back on the previous release). Then HEAD is rolled out: one
new instance starts, one old one stops (one of them killed with SIGKILL, a host dying mid-deploy),
until only new ones are left, with a stored schedule added through HEAD's ``Control`` half-way.
Throughout, each slot of both jobs runs once (none twice, none lost between the window's edges),
a job's fencing tokens never go back, and every instance runs jobs in every phase it is alive
for, the old ones until they are stopped.
Half-way, ``relay migrate --plan`` says the old instances can go on beside the migrated store,
and ``relay migrate --contract`` is refused while one of them lives.

Two more tests: what the previous release does on a store HEAD contracted, and a job whose
schedule the deploy changes.
"""

from __future__ import annotations

import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import relay
from relay import Control
from relay.errors import InstancesTooOld
from relay.migrate import contract, migrate, plan
from tests.support.procs import ROOT
from tests.upgrade.fleet import Fleet, Instance, Run, wait_for
from tests.upgrade.previous import Release

EDGE = timedelta(seconds=2)
"""Slots this close to a window's edge may be decided either side of it (a tick is late under
load, a stop lands mid-tick): they must still run at most once, but may be missing."""

STORED = "every-second"
"""The stored schedule added half-way through the rollout (task ``echo``, every second)."""


@pytest.mark.slow
def test_a_rolling_upgrade_and_a_rolled_back_canary_run_every_slot_once(
    lease_url: str, previous: Release, tmp_path: Path
) -> None:
    assert previous.python is not None
    fleet = Fleet(lease_url, tmp_path, {"old": previous.python, "new": Path(sys.executable)})
    try:
        added = deploy(fleet)
        end = datetime.now(timezone.utc)
    finally:
        fleet.stop_all()
    print(report(fleet))
    check_releases(fleet, previous)
    runs = fleet.runs()
    killed = {i.name for i in fleet.instances.values() if i.killed}
    first = min(r.slot for r in runs if r.job == "tick")
    check_each_slot_once(runs, "tick", first, end, killed)
    check_each_slot_once(runs, STORED, added + EDGE, end, killed)
    check_tokens(runs)
    own = fleet.runs_by_phase(own=True)
    idle = {phase: [n for n, mine in row.items() if not mine] for phase, row in own.items()}
    assert {phase: names for phase, names in idle.items() if names} == {}
    troubles = {i.name: troubles_of(i) for i in fleet.instances.values() if troubles_of(i)}
    assert troubles == {}
    codes = {i.name: i.proc.returncode for i in fleet.instances.values()}
    assert codes == {i.name: -9 if i.killed else 0 for i in fleet.instances.values()}


def deploy(fleet: Fleet) -> datetime:
    """The deploy, phase by phase; each phase lasts until every live instance has run a job of
    its own. Returns when the stored schedule was added."""
    fleet.start("old", "old-a", "old-b")
    step(fleet, "two old")
    fleet.start("new", "new-canary")
    step(fleet, "canary beside two old")
    fleet.stop("new-canary")
    step(fleet, "canary stopped")
    fleet.start("old", "old-c")
    step(fleet, "canary's host back on old")
    fleet.start("new", "new-1")
    step(fleet, "new-1 beside three old")
    check_plan(fleet)
    fleet.stop("old-a")
    step(fleet, "old-a stopped")
    with Control(fleet.url) as control:
        added = control.add_schedule(STORED, "echo", every=1).updated_at
    step(fleet, "stored schedule added")
    fleet.start("new", "new-2")
    step(fleet, "new-2 started")
    fleet.stop("old-b", kill=True)  # its host dies mid-deploy: its leases expire
    step(fleet, "old-b killed")
    fleet.start("new", "new-3")
    step(fleet, "new-3 started")
    check_contract_refused(fleet)
    # Each slot is a race, and a loaded machine can hand one instance a long streak: the last
    # phase with both releases lasts until each has won a slot of each job beside the other.
    wait_for(lambda: not unmixed(fleet), 60, lambda: f"only one release won {unmixed(fleet)}")
    fleet.stop("old-c")
    step(fleet, "all new")
    assert added is not None
    return added


def step(fleet: Fleet, name: str) -> None:
    fleet.phase(name)
    fleet.settle()


def unmixed(fleet: Fleet) -> list[str]:
    """The raced jobs one release has not won a slot of while the other release was live."""
    releases = {i.name: i.release for i in fleet.instances.values()}
    won: set[tuple[str, str]] = set()
    for row in fleet.runs_by_phase(own=False).values():
        if len({releases[n] for n in row}) == 2:
            won |= {(releases[n], r.job) for n, runs in row.items() for r in runs}
    return [f"{job} ({release})" for job in ("tick", STORED) for release in ("old", "new")
            if (release, job) not in won]  # fmt: skip


TROUBLES = {
    "store_unavailable", "store_incompatible", "schedule_not_runnable", "failed", "exhausted",
    "missed",
}  # fmt: skip
"""Events that say two releases do not get along. A takeover, a fenced-off start or a lost lease
may also come from a process the loaded machine stalled past its lease: the report lists them."""


def troubles_of(instance: Instance) -> list[list[Any]]:
    return [line for line in instance.lines("event") if line[0] in TROUBLES]


def check_plan(fleet: Fleet) -> None:
    """``relay migrate --plan`` says each live old instance can go on beside the migrated store."""
    said = plan(fleet.url).splitlines()
    for old in (i for i in fleet.live() if i.release == "old"):
        assert any(old.owner in line and "can go on beside it" in line for line in said), said


def check_contract_refused(fleet: Fleet) -> None:
    """``relay migrate --contract`` is refused while an old instance lives, naming it (and only
    old ones: a stopped old instance is listed until its heartbeat is late)."""
    with pytest.raises(InstancesTooOld) as refused:
        contract(fleet.url)
    named = {owner for owner, _ in refused.value.instances}
    old = {i.owner for i in fleet.instances.values() if i.release == "old"}
    assert fleet.instances["old-c"].owner in named <= old, (named, old)


def check_releases(fleet: Fleet, previous: Release) -> None:
    """Old instances ran the previous release's installed copy, new ones this checkout."""
    for instance in fleet.instances.values():
        [(_, version, path, _)] = instance.lines("hello")
        where, found = Path(path).resolve(), (instance.name, version, path)
        if instance.release == "old":
            assert previous.python is not None
            assert where.is_relative_to(previous.python.parents[1]), found
            assert version == previous.tag.removeprefix("v"), found
        else:
            assert where.is_relative_to(ROOT / "shared"), found
            assert version == relay.__version__, found


def check_each_slot_once(
    runs: list[Run], job: str, start: datetime, end: datetime, killed: set[str], every: int = 1
) -> None:
    """No slot of ``job`` ran twice; each one from ``start`` to ``end`` (less the edge) ran (each
    ``every`` seconds from the epoch).

    A slot started again counts once when each start before the last was a killed instance's,
    and each new start is a new attempt: a takeover of a run whose runner died.
    """
    starts: dict[datetime, list[Run]] = {}
    for run in (r for r in runs if r.job == job):
        starts.setdefault(run.slot, []).append(run)
    twice = [
        [(r.attempt, r.owner) for r in found]
        for found in starts.values()
        if len(found) > 1
        and not (
            all(r.owner in killed for r in found[:-1])
            and [r.attempt for r in found] == sorted({r.attempt for r in found})
        )
    ]
    assert twice == [], f"{job}: slots that ran more than once"
    want, last = start.replace(microsecond=0) + timedelta(seconds=1), end - EDGE
    want += timedelta(seconds=-int(want.timestamp()) % every)
    lost = []
    while want <= last:
        if want not in starts:
            lost.append(want.isoformat())
        want += timedelta(seconds=every)
    assert lost == [], f"{job}: slots that never ran"


def check_tokens(runs: list[Run]) -> None:
    """A job's tokens never go back: each run's is above those of every run two slots before it.

    Two slots, not one: the slot before may be leased a moment after this one by an instance
    whose tick came late, and take the larger token, which is no step back.
    """
    for job in {r.job for r in runs}:
        ordered = sorted((r for r in runs if r.job == job), key=lambda r: r.slot)
        highest, behind = 0, 0
        for run in ordered:
            while ordered[behind].slot <= run.slot - timedelta(seconds=2):
                highest = max(highest, ordered[behind].token)
                behind += 1
            assert run.token > highest, f"{job}: {run} has a token below an earlier slot's"


def report(fleet: Fleet) -> str:
    """What the old/new mix did: per phase, how long it lasted and, per live instance, the runs
    of its own job / the slots it won of the raced ones; then each instance's warnings."""
    lines = [f"store {fleet.url}", "  phase, its length, instance(release)=own runs/slots won"]
    own, raced = fleet.runs_by_phase(own=True), fleet.runs_by_phase(own=False)
    for phase, begun, end in fleet.spans():
        counts = "  ".join(
            f"{n}({fleet.instances[n].release})={len(runs)}/{len(raced[phase][n])}"
            for n, runs in own[phase].items()
        )
        lines.append(f"  {phase:28} {end - begun:5.1f}s  {counts}")
    for instance in fleet.instances.values():
        events = Counter(kind for kind, _, _ in instance.lines("event"))
        refused = instance.lines("refused")
        if events or refused:
            lines.append(f"  {instance.name}: events {dict(events)} refused {refused}")
    return "\n".join(lines)


RUNS_ON_A_CONTRACTED_STORE = {("v0.1.0", "redis"), ("v0.1.0", "nats")}
"""(previous release, store) pairs where the previous release still runs on a store HEAD contracted.

Relay 0.1 records no layout and reads no floor: it refuses a schema version above its own, which
a contraction writes into PostgreSQL's ``meta`` and SQLite's ``relay_meta``, but it checks nothing
on Redis and NATS KV, so there it starts and runs (harmless in 0.2, whose contraction removes
nothing there). Every later release reads the floor on every store and refuses at start."""


@pytest.mark.slow
def test_the_previous_release_on_a_store_contracted_by_head(
    lease_url: str, previous: Release, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    assert previous.python is not None
    store = request.node.callspec.params["lease_url"]
    migrate(lease_url)
    contract(lease_url)
    fleet = Fleet(lease_url, tmp_path, {"old": previous.python, "new": Path(sys.executable)})
    try:
        [late] = fleet.start("old", "old-late")
        if (previous.tag, store) in RUNS_ON_A_CONTRACTED_STORE:
            step(fleet, "previous release on a contracted store")
            assert troubles_of(late) == []
        else:
            assert late.proc.wait(timeout=60) == 3
            [(kind, message, _)] = late.lines("refused")
            assert "newer" in message and "upgrade Relay" in message, (kind, message)
            assert late.runs() == []
    finally:
        fleet.stop_all()
    print(report(fleet))


DECLARES_NOTHING = {"v0.1.0"}
"""Previous releases that declare no job definition: they fire their own until they stop."""
HEARTBEAT = timedelta(seconds=10)
"""How late an instance of a release that declares may still fire a slot of its old definition
after the first new instance started: one heartbeat (docs/deployment.md)."""


@pytest.mark.slow
def test_a_job_whose_schedule_the_deploy_changes(
    lease_url: str, previous: Release, tmp_path: Path
) -> None:
    """``tick`` goes from every second (old) to every two seconds (new): the odd seconds are slots
    of the old definition only. Each slot runs once; once the old definition no longer decides
    (no old instance left if the previous release declares nothing, one heartbeat after the first
    new instance otherwise), no odd second runs."""
    assert previous.python is not None
    fleet = Fleet(lease_url, tmp_path, {"old": previous.python, "new": Path(sys.executable)})
    try:
        fleet.start("old", "old-a", "old-b")
        step(fleet, "two old, tick every 1 s")
        [first_new] = fleet.start("new", "new-1", every=2)
        step(fleet, "new-1, tick every 2 s")
        fleet.stop("old-a")
        step(fleet, "old-a stopped")
        fleet.start("new", "new-2", every=2)
        fleet.stop("old-b")
        gone = datetime.now(timezone.utc)
        fleet.phase("only new")
        wait_for(lambda: len(tick_slots_after(fleet, gone + EDGE)) >= 3, 60, "new ticks")
        end = datetime.now(timezone.utc)
    finally:
        fleet.stop_all()
    print(report(fleet))
    runs = fleet.runs()
    # Both definitions have the even seconds: one of them runs each, whichever decides.
    first = min(r.slot for r in runs if r.job == "tick")
    check_each_slot_once(runs, "tick", first, end, set(), every=2)
    odd = [r for r in runs if r.job == "tick" and r.slot.second % 2]
    started = datetime.fromtimestamp(first_new.started, timezone.utc)
    if previous.tag in DECLARES_NOTHING:
        assert any(r.slot > started + EDGE for r in odd)  # the old ones went on with theirs
        decided = gone + EDGE
    else:
        decided = started + HEARTBEAT + EDGE
    assert [r for r in odd if r.slot > decided] == []
    assert {i.name: troubles_of(i) for i in fleet.instances.values() if troubles_of(i)} == {}


def tick_slots_after(fleet: Fleet, moment: datetime) -> list[datetime]:
    return [r.slot for r in fleet.runs() if r.job == "tick" and r.slot > moment]

"""Partitions and outages, with real scheduler processes behind a fault-injecting proxy.

Three instances (``tests.support.partition_instance``) run a daily ``long`` job (one slot, caught
up) and a ``tick`` job every second on Redis, PostgreSQL or NATS KV. Their store URLs carry
``timeout=0.5``; the lease is 3 s, the heartbeat 0.5 s. The proxy drops every packet (no reset)
of the instances behind it, then heals. Times come from the handlers' log lines
(``time.monotonic()``, one clock for every process of the host) and the events' own fields.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from relay import RunState, open_backend
from relay.fencing import SQLFence
from tests.support.backends import LEASE_BACKENDS
from tests.support.event_log import read_events
from tests.support.fault_proxy import proxied
from tests.support.procs import ROOT
from tests.support.slots import one_slot_behind

pytestmark = pytest.mark.slow

LEASE, HEARTBEAT, TIMEOUT = 3.0, 0.5, 0.5
SLACK = 3.0
"""Room for a loaded machine (two cores, several test runs) in every time bound below."""
NETWORK = [
    pytest.param(name, marks=LEASE_BACKENDS[name][1], id=name)
    for name in ("redis", "postgres", "nats")
]


class Group:
    """Instance processes sharing one handlers' log, one events log and one fenced resource."""

    def __init__(self, tmp: Path) -> None:
        self.log, self.events_path, self.fence = (
            tmp / "runs.log",
            tmp / "events.jsonl",
            tmp / "f.db",
        )
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.long = one_slot_behind()  # the same slot for every instance

    def start(self, name: str, url: str, work: float, after_lost: float = 0.0) -> str:
        """Start an instance on ``url``; its owner name."""
        args = {
            "name": name, "url": url, "log": str(self.log), "events": str(self.events_path),
            "fence": str(self.fence), "lease": LEASE, "heartbeat": HEARTBEAT, "work": work,
            "after_lost": after_lost, "long": self.long,
        }  # fmt: skip
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.partition_instance", json.dumps(args)],
            cwd=ROOT, env=env,
        )  # fmt: skip
        self.procs[name] = proc
        return f"{name}:{proc.pid}"

    def lines(self, job: str | None = None, what: str | None = None) -> list[list[Any]]:
        """The handlers' log lines ``[job, run id, attempt, token, instance, what, monotonic]``."""
        text = self.log.read_text() if self.log.exists() else ""
        found = [json.loads(line) for line in text.splitlines() if line.strip()]
        return [x for x in found if job in (None, x[0]) and what in (None, x[5])]

    def events(self, kind: str, **where: Any) -> list[dict[str, Any]]:
        found = read_events(self.events_path, kind)
        return [e for e in found if all(e[f"relay_{k}"] == v for k, v in where.items())]

    def until(self, what: str, found: Callable[[], list[Any]], timeout: float = 30) -> Any:
        """The first of ``found()`` once there is one; fail naming ``what`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not (items := found()):
            assert time.monotonic() < deadline, f"no {what} within {timeout}s"
            time.sleep(0.05)
        return items[0]

    def up(self, owner: str) -> None:
        """Wait until ``owner`` decided something: its loop is stepping."""
        self.until(f"{owner} up", lambda: self.events("won", owner=owner) or self.events(
            "lost", owner=owner))  # fmt: skip

    def decisions(self, owner: str) -> list[dict[str, Any]]:
        """The tick runs ``owner`` decided (won or lost), in order."""
        return [e for e in read_events(self.events_path) if e.get("relay_owner") == owner
                and e["relay_event"] in ("won", "lost") and e["relay_job"] == "tick"]  # fmt: skip

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextmanager
def group(tmp: Path) -> Iterator[Group]:
    made = Group(tmp)
    try:
        yield made
    finally:
        made.close()


def timed(url: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}timeout={TIMEOUT}"


def per_call(url: str) -> float:
    """The backend's stated deadline for one call."""
    backend = open_backend(url)
    try:
        deadline = backend.deadline  # type: ignore[union-attr]
        return float(deadline.per_call)
    finally:
        backend.close()


@pytest.mark.parametrize("store", NETWORK)
def test_an_instance_cut_off_lets_its_run_go_and_another_takes_it_over(
    store: str, tmp_path: Path
) -> None:
    factory, _ = LEASE_BACKENDS[store]
    with factory(tmp_path) as url, proxied(url) as (proxy, near), group(tmp_path) as g:
        deadline = per_call(timed(url))
        cut = g.start("cut", timed(near), work=30, after_lost=2.0)
        first = g.until("the long run", lambda: g.lines("long", "start"))
        others = [g.start(name, timed(url), work=5) for name in ("b", "c")]
        for owner in others:
            g.up(owner)
        proxy.set("drop")
        dropped = time.monotonic()
        lost = g.until("lost", lambda: g.lines("long", "lost"))
        event = g.until("lease_lost", lambda: g.events("lease_lost", owner=cut))
        taken = g.until("takeover", lambda: g.events("taken_over", run_id=first[1]))
        refused = g.until("late write", lambda: g.lines("long", "fenced write refused"))
        time.sleep(2)  # the partition lasts: ticks go on through b and c
        decided = len(g.decisions(cut))
        proxy.set("pass")
        healed = time.monotonic()
        back = g.until("cut sees the store", lambda: g.events("store_recovered", owner=cut))
        g.until("cut decides again", lambda: g.decisions(cut)[decided:], timeout=45)
        rejoined_after = time.monotonic() - healed
        g.until("the takeover's end", lambda: g.lines("long", "done"))
    again = [x for x in g.lines("long", "start") if x[4] != "cut"]
    # The cut-off runner let its run go within lease + deadline of its last renewal (at most a
    # heartbeat before the drop), and told its handler.
    assert lost[4] == "cut" and lost[3] == first[3]
    assert lost[6] - dropped < HEARTBEAT + LEASE + deadline + SLACK, lost[6] - dropped
    assert event["relay_silent_for"] >= LEASE and event["relay_token"] == first[3]
    # Another instance (a direct connection) took it over with a newer token; the cut-off
    # runner's late fenced write was refused, and the new attempt's write stands.
    assert taken["relay_previous_owner"] == cut and taken["relay_owner"] in others
    assert taken["relay_token"] > first[3] and refused[4] == "cut"
    assert SQLFence.sqlite(g.fence).read("report") == (
        taken["relay_token"],
        f"started by {taken['relay_owner'].split(':')[0]}",
    )
    # Ticks went on: every second of the partition had its run, none ran twice.
    ticks = g.lines("tick", "start")
    during = {x[1] for x in ticks if dropped + 1.5 < x[6] < healed - 1.5}
    assert len(during) >= int(healed - dropped - 3) - 1, ticks
    assert all(n == 1 for n in Counter(x[1] for x in ticks if x[4] != "cut").values())
    # The cut-off instance's loop went on: it recovered and decides again.
    assert back["relay_takeover_in"] == 0 or back["relay_takeover_in"] == LEASE
    assert [x[3] for x in again] == [taken["relay_token"]]
    print(
        f"\n{store}: run.lost {lost[6] - dropped:.2f}s after the drop, taken over and started "
        f"{again[0][6] - dropped:.2f}s after it (lease {LEASE}s, deadline {deadline}s); "
        f"the cut-off instance decided again {rejoined_after:.2f}s after the heal"
    )


@pytest.mark.parametrize("store", NETWORK)
def test_a_run_that_finished_during_an_outage_longer_than_a_lease_runs_once(
    store: str, tmp_path: Path
) -> None:
    factory, _ = LEASE_BACKENDS[store]
    with factory(tmp_path) as url, proxied(url) as (proxy, near), group(tmp_path) as g:
        owners = [g.start("a", timed(near), work=2)]
        first = g.until("the long run", lambda: g.lines("long", "start"))
        owners += [g.start(name, timed(near), work=2) for name in ("b", "c")]
        for owner in owners[1:]:
            g.up(owner)
        proxy.set("drop")  # the store is gone for every instance
        dropped = time.monotonic()
        done = g.until("the handler's end", lambda: g.lines("long", "done"))
        time.sleep(max(0.0, dropped + LEASE + 2 - time.monotonic()))
        proxy.set("pass")
        healed = time.monotonic()
        g.until("recovery", lambda: g.events("store_recovered"))
        next_tick = g.until("the next tick", lambda: [
            x for x in g.lines("tick", "start") if x[6] > healed
        ], timeout=45)  # fmt: skip
        time.sleep(LEASE + 2)  # every grace is over: sweeps would take an unfinished run now
        backend = open_backend(url)
        try:
            [record] = [r for r in backend.runs("long") if r.id == first[1]]
        finally:
            backend.close()
    assert done[6] < healed  # the handler finished during the outage
    # Its finish was recorded once the store was back: one attempt, never taken over or rerun.
    assert record.state is RunState.SUCCEEDED and record.token == first[3], record
    assert len(g.lines("long", "start")) == 1
    assert g.events("taken_over", job="long") == [] and g.events("abandoned") == []
    # The runner heard it: a finish whose answer the outage lost (the proxy delivered it late)
    # and that it sent again is answered with what the store recorded, not refused.
    [succeeded] = g.events("succeeded", run_id=first[1])
    assert succeeded["relay_token"] == first[3]
    assert g.events("fenced_off", run_id=first[1]) == []
    # Ticks: no slot ran twice, and tokens never went back.
    ticks = g.lines("tick", "start")
    assert all(n == 1 for n in Counter(x[1] for x in ticks).values()), ticks
    assert len({x[3] for x in ticks}) == len(ticks)
    # A tick whose start the outage cut off is leased again (taken over) after the recovery, so
    # after later slots: its token is above those of the slots before it, the others follow theirs.
    again = {e["relay_run_id"] for kind in ("taken_over", "picked_up", "retried")
             for e in g.events(kind, job="tick")} | {x[1] for x in ticks if x[2] > 1}  # fmt: skip
    by_slot = sorted(ticks, key=lambda x: x[1])
    tokens = [x[3] for x in by_slot if x[1] not in again]
    assert tokens == sorted(tokens), by_slot
    for i, tick in enumerate(by_slot):
        assert tick[1] not in again or all(tick[3] > x[3] for x in by_slot[:i]), by_slot
    assert next_tick[6] - healed < 20
    print(
        f"\n{store}: outage {healed - dropped:.1f}s (lease {LEASE}s); the next tick started "
        f"{next_tick[6] - healed:.2f}s after the heal"
    )

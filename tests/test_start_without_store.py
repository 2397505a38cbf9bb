"""Hosts that start while their store is down wait for it, are not ready, then run each run once.

The store sits behind a fault proxy (``tests.support.fault_proxy``) that resets every connection
until the test lets them through: the store is down at start, then comes up. Two real standalone
scheduler processes start behind it; ``relay health`` (the probe) fails until the store answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

import relay
from relay import open_backend
from relay.backends._deferred import DeferredBackend
from relay.engine.waiting import wait_for_store
from relay.errors import BackendUnavailable
from relay.events import EventBus, StoreRecovered, StoreUnavailable, StoreWaiting
from tests.support.backends import CLAIM_BACKENDS, LEASE_BACKENDS
from tests.support.event_log import read_events
from tests.support.fault_proxy import proxied
from tests.support.procs import ROOT

NETWORK = [
    pytest.param(name, marks=LEASE_BACKENDS[name][1], id=name)
    for name in ("redis", "postgres", "nats")
]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}


def until(what: str, found: Callable[[], Any], timeout: float = 60) -> Any:
    """``found()`` once it is truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (value := found()):
        assert time.monotonic() < deadline, f"no {what} within {timeout}s"
        time.sleep(0.05)
    return value


def health(url: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "relay.cli", "health", "--backend", url]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=ENV, cwd=ROOT)


@contextmanager
def instances(url: str, tmp: Path, count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` standalone schedulers (``tests.support.instance``) running job ``job``."""
    args = {
        "url": url, "log": str(tmp / "runs.log"), "events": str(tmp / "events.jsonl"),
        "lease": 5, "heartbeat": 1, "every": 1, "work": 0.05,
    }  # fmt: skip
    command = [sys.executable, "-m", "tests.support.instance"]
    procs = [
        subprocess.Popen([*command, json.dumps({**args, "name": f"i{n}"})], cwd=ROOT, env=ENV)
        for n in range(count)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def reporting(events: Path, kind: str) -> set[int]:
    """The processes that reported an event of type ``kind``."""
    return {e["process"] for e in read_events(events, kind)}


def starts(tmp: Path) -> list[str]:
    """The run ids the instances started, one per start, in order."""
    log = tmp / "runs.log"
    lines = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return [line[0] for line in lines if line[4] == "start"]


@pytest.mark.parametrize("store", NETWORK)
def test_schedulers_started_with_the_store_down_wait_then_run_each_run_once(
    store: str, tmp_path: Path
) -> None:
    factory, _ = LEASE_BACKENDS[store]
    events = tmp_path / "events.jsonl"
    with factory(tmp_path) as url, proxied(url) as (proxy, near):
        proxy.set("reset")  # the store is down: every connection is refused
        with instances(near, tmp_path, 2) as procs:
            pids = {p.pid for p in procs}
            until("both waiting", lambda: reporting(events, "store_waiting") == pids)
            assert all(p.poll() is None for p in procs), "an instance exited"
            assert starts(tmp_path) == []
            assert health(url).returncode == 1  # not ready: no instance has beat
            proxy.set("pass")  # the store comes up
            until("runs of both instances' era", lambda: len(set(starts(tmp_path))) >= 4)
            until("both recovered", lambda: reporting(events, "store_recovered") == pids)
            ready = until("a ready probe", lambda: health(url).returncode == 0 or None)
            assert ready
    waiting = read_events(events, "store_waiting")
    assert len(waiting) <= 2 * 2, "store_waiting was reported on every try, not at an interval"
    counted = Counter(starts(tmp_path))
    assert counted and max(counted.values()) == 1, f"a run started twice: {counted}"


def test_a_deferred_backend_opens_nothing_until_used(tmp_path: Path) -> None:
    """Creating it creates no file; a failed open is tried again at the next call."""
    folder = tmp_path / "later"
    backend = open_backend(f"sqlite:///{folder / 'relay.db'}", deferred=True)
    assert isinstance(backend, DeferredBackend) and not backend.is_open
    assert backend.capability == "lease" and not folder.exists()
    with pytest.raises(BackendUnavailable):
        backend.runs()
    folder.mkdir()
    assert backend.runs() == [] and backend.is_open
    backend.close()


def test_waiting_reports_at_a_steady_interval_not_per_try(tmp_path: Path) -> None:
    """Many failed tries, one report per ``report_every`` of the (fake) monotonic clock."""
    folder = tmp_path / "later"
    backend = open_backend(f"sqlite:///{folder / 'relay.db'}", deferred=True)
    bus, seen = EventBus(), []
    bus.on(StoreWaiting, seen.append)
    bus.on(StoreRecovered, seen.append)
    now = [0.0]

    def monotonic() -> float:
        now[0] += 1.0  # every try is a second later
        if now[0] >= 40:
            folder.mkdir(exist_ok=True)  # the store comes up after 40 tries or so
        return now[0]

    stopping = threading.Event()
    opened = wait_for_store(
        backend, owner="o", events=bus, stopping=stopping, retry=0.001, report_every=10,
        monotonic=monotonic,
    )  # fmt: skip
    assert opened and backend.is_open
    waits = [e for e in seen if isinstance(e, StoreWaiting)]
    assert 3 <= len(waits) <= 5, [e.waited for e in waits]  # ~40 tries, one report per 10 s
    assert all(later.waited - earlier.waited >= 10 for earlier, later in pairwise(waits))
    assert "waiting" in waits[0].message() and str(folder) in waits[0].backend
    assert isinstance(seen[-1], StoreRecovered)
    backend.close()
    stopping.set()
    again = open_backend(f"sqlite:///{tmp_path / 'missing' / 'x.db'}", deferred=True)
    assert not wait_for_store(again, owner="o", events=bus, stopping=stopping)


@pytest.mark.redis
def test_serve_started_with_the_store_down_waits_then_runs(tmp_path: Path) -> None:
    """``serve()`` waits off the event loop (which keeps running), then runs once it answers."""
    factory, _ = LEASE_BACKENDS["redis"]
    with factory(tmp_path) as url, proxied(url) as (proxy, near):
        proxy.set("reset")
        scheduler = relay.Scheduler(near, lease=5, tick=0.1)
        seen: list[object] = []
        scheduler.on(StoreWaiting, seen.append)
        scheduler.on(StoreRecovered, seen.append)
        ran: list[str] = []

        @scheduler.job(every=1, name="tick")
        async def tick(run: relay.Run) -> None:
            ran.append(run.id)

        async def main() -> int:
            serving = asyncio.ensure_future(scheduler.serve(handle_signals=False))
            beats = 0
            while not seen:  # the loop is free while serve() waits for the store
                beats += 1
                await asyncio.sleep(0.01)
            assert ran == [] and not serving.done()
            proxy.set("pass")
            while not ran:
                await asyncio.sleep(0.05)
            scheduler.stop()
            await serving
            return beats

        assert asyncio.run(main()) > 0
    assert isinstance(seen[0], StoreWaiting) and isinstance(seen[-1], StoreRecovered)
    assert len(set(ran)) == len(ran) >= 1


@pytest.mark.redis
def test_serve_stopped_while_waiting_for_the_store_returns(tmp_path: Path) -> None:
    factory, _ = LEASE_BACKENDS["redis"]
    with factory(tmp_path) as url, proxied(url) as (proxy, near):
        proxy.set("reset")
        scheduler = relay.Scheduler(near, lease=5)
        waiting = threading.Event()
        scheduler.on(StoreWaiting, lambda event: waiting.set())

        async def main() -> None:
            serving = asyncio.ensure_future(scheduler.serve(handle_signals=False))
            while not waiting.is_set():
                await asyncio.sleep(0.01)
            serving.cancel()  # an application shutting down before the store ever answered
            with pytest.raises(asyncio.CancelledError):
                await serving

        asyncio.run(main())
        assert proxy.accepted >= 1


@pytest.mark.parametrize(
    "store",
    [
        pytest.param(name, marks=CLAIM_BACKENDS[name][1], id=name)
        for name in ("redis-script", "nats-dedup")
    ],
)
def test_a_scheduler_on_a_claim_store_that_is_down_is_created_and_wins_once_it_is_up(
    store: str, tmp_path: Path
) -> None:
    factory, _ = CLAIM_BACKENDS[store]
    with factory(tmp_path) as url, proxied(url) as (proxy, near):
        proxy.set("reset")
        scheduler = relay.Scheduler(near)  # before, BackendUnavailable here
        down: list[object] = []
        scheduler.on(StoreUnavailable, down.append)

        @scheduler.job(every=1, name="tick")
        def tick(run: relay.Run) -> None: ...

        try:
            assert scheduler.backend.capability == "claim"
            until("the outage reported", lambda: scheduler.run_pending() == [] and down, 10)
            proxy.set("pass")
            won = until("a run won", scheduler.run_pending, 10)
            assert [run.job for run in won] == ["tick"]
            assert scheduler.join(30)
        finally:
            scheduler.backend.close()

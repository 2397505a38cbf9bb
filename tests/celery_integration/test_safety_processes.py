"""Real ``celery beat`` / ``celery worker`` processes refuse a plausible mistake at start, loudly.

Each refusal must come within seconds and name the fix; the set-ups that are right (one
``install`` call, the broker's Redis as the store, ``relay_jobs`` under Celery's stock beat) must
run. Refusals happen before any broker connection, so they use Celery's in-memory transport.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from relay.runs import RunState
from tests.celery_integration.cluster import Cluster, cluster
from tests.celery_integration.test_celery_processes import one_run_now, store
from tests.support import services

pytestmark = pytest.mark.slow

MEMORY = "memory://"
STOCK = "celery.beat:PersistentScheduler"
ONE_HOST = "serves one host only"


def sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'relay.db'}"


def refused(c: Cluster, process: subprocess.Popen[bytes]) -> str:
    """The log of a process that had to stop by itself with a failure."""
    code = c.exit_code(process)
    assert code != 0, c.logs()
    return c.logs(tail=None)


@pytest.mark.parametrize(
    ("conf", "backend", "words"),
    [
        (
            {"relay_backnd": "redis://elsewhere:6379/0"},
            "sqlite",
            ["relay_backnd (did you mean relay_backend?)"],
        ),
        ({"relay_lease_s": 30}, "sqlite", ["relay_lease_s (did you mean relay_lease?)"]),
        ({}, "", ["Relay has no backend", "set app.conf.relay_backend", "memory://"]),
    ],
    ids=["misspelled-backend", "misspelled-lease", "no-backend-no-redis-broker"],
)
def test_beat_and_worker_refuse_bad_settings_at_start(
    tmp_path: Path, conf: dict[str, Any], backend: str, words: list[str]
) -> None:
    url = sqlite(tmp_path) if backend == "sqlite" else ""
    with cluster(tmp_path, MEMORY, url, {"tick": {"every": 1}}) as c:
        c.set(conf=json.dumps(conf))
        beat, worker = c.beat(), c.worker(pool="solo")
        for process in (beat, worker):
            log = refused(c, process)
        for word in words:
            assert log.count(word) >= 2, log  # beat's and the worker's
    assert not (tmp_path / "relay.db").exists() or backend == "sqlite"


def test_beat_refuses_an_app_without_the_worker_hooks(tmp_path: Path) -> None:
    with cluster(tmp_path, MEMORY, sqlite(tmp_path), {"tick": {"every": 1}}) as c:
        c.set(install="none")
        log = refused(c, c.beat())
    assert "no Relay worker hooks" in log and "call relay_celery.install(app)" in log


def test_a_scheduled_task_with_celery_retries_stops_the_worker(tmp_path: Path) -> None:
    schedule = {"nightly": {"every": 3600, "task": "autoretrying"}}
    with cluster(tmp_path, MEMORY, sqlite(tmp_path), schedule) as c:
        log = refused(c, c.worker(pool="solo"))
    assert "'nightly') sets autoretry_for, but Relay retries its runs itself" in log
    assert "set max_attempts in app.conf.relay_jobs['nightly'] instead" in log


def test_a_scheduled_task_with_celery_retries_stops_beat_too(tmp_path: Path) -> None:
    schedule = {"nightly": {"every": 3600, "task": "autoretrying"}}
    with cluster(tmp_path, MEMORY, sqlite(tmp_path), schedule) as c:
        log = refused(c, c.beat())
    assert "'nightly') sets autoretry_for, but Relay retries its runs itself" in log
    assert "set max_attempts in app.conf.relay_jobs['nightly'] instead" in log


@pytest.mark.redis
def test_one_install_call_sets_up_beat_and_workers_and_sqlite_warns_once(tmp_path: Path) -> None:
    broker = services.require("redis")
    with cluster(tmp_path, broker, sqlite(tmp_path), {"tick": {"every": 1}}) as c:
        c.set(install="one-call")
        beat, worker = c.beat(scheduler=None), c.worker()
        c.wait_for("two runs", lambda: len(c.events("end")) >= 2)
        logs = {name: (tmp_path / f"{name}.log").read_text() for name in ("beat0", "worker1")}
        c.kill(beat)
        c.kill(worker)
    assert "scheduler -> relay_celery.beat.RelayScheduler" in logs["beat0"]
    for name, log in logs.items():
        assert log.count(ONE_HOST) == 1, f"{name}:\n{log}"


@pytest.mark.redis
def test_without_a_backend_a_redis_broker_is_the_store(tmp_path: Path) -> None:
    broker = services.require("redis")
    job = f"tick_{tmp_path.name[-12:].replace('-', '_')}"
    try:
        with cluster(tmp_path, broker, "", {job: {"every": 1}}) as c:
            c.beat()
            c.worker()
            c.wait_for("two runs", lambda: len(c.events("end")) >= 2)
            log = c.logs(tail=None)
    finally:
        _forget_job(broker, job)
    assert "relay_backend is not set; deciding runs on the broker's Redis" in log
    assert ONE_HOST not in log


@pytest.mark.redis
def test_stock_beat_loads_a_schedule_with_relay_jobs_and_relay_runs_it_too(tmp_path: Path) -> None:
    schedule = {"tick": {"every": 1, "task": "plain", "relay_jobs": {"overlap": "skip"}}}
    with cluster(tmp_path, services.require("redis"), sqlite(tmp_path), schedule) as c:
        c.worker()
        stock = c.beat(scheduler=STOCK)
        c.wait_for("two runs from stock beat", lambda: len(c.events("plain")) >= 2)
        c.kill(stock)
        c.wait_quiet(1.5)
        seen = len(c.events("plain"))
        c.beat()  # the same app, switched back to Relay by the one setting
        c.wait_for("a run from Relay", lambda: len(c.events("plain")) > seen)
        events = c.events("plain")
    assert all(e["run"] is None for e in events[:seen])  # stock beat: no Relay run
    assert all(e["run"].startswith("tick@") for e in events[seen:])


def test_the_relay_key_is_what_stock_beat_cannot_load(tmp_path: Path) -> None:
    """Why ``relay_jobs`` exists (and why RelayScheduler warns about the ``"relay"`` key)."""
    schedule = {"tick": {"every": 1, "task": "plain", "relay": {"overlap": "skip"}}}
    with cluster(tmp_path, MEMORY, sqlite(tmp_path), schedule) as c:
        log = refused(c, c.beat(scheduler=STOCK))
    assert "unexpected keyword argument 'relay'" in log


@pytest.mark.redis
def test_a_celery_retry_inside_a_run_becomes_a_relay_attempt(tmp_path: Path) -> None:
    url = sqlite(tmp_path)
    schedule = {"flaky": {**one_run_now(max_attempts=3), "task": "retrying"}}
    with cluster(tmp_path, services.require("redis"), url, schedule) as c:
        c.set(lease=3, heartbeat=1)
        c.beat()
        c.worker()
        c.wait_for("the second attempt to end", lambda: c.events("end") != [])
        c.wait_quiet()
        events, log = c.events(), c.logs(tail=None)
    assert [(e["event"], e["attempt"]) for e in events] == [("start", 1), ("start", 2), ("end", 2)]
    assert "asked Celery to retry flaky@" in log and "cannot be honoured" in log
    assert "refused the start of" not in log  # Celery published no retry message
    backend = store(url)
    (record,) = backend.runs("flaky")
    assert record.state is RunState.SUCCEEDED and record.failures == 1
    backend.close()


def _forget_job(broker: str, job: str) -> None:
    """Delete the Relay keys a test job left on the shared Redis (default prefix ``relay:``)."""
    import redis

    client = redis.Redis.from_url(broker)
    try:
        keys = list(client.scan_iter(match=f"relay:{{{job}}}:*", count=1000))
        if keys:
            client.delete(*keys)
        kind = client.type("relay:jobs")
        if kind == b"zset":
            client.zrem("relay:jobs", job)
        elif kind == b"set":
            client.srem("relay:jobs", job)
        elif kind == b"hash":
            client.hdel("relay:jobs", job)
    finally:
        client.close()

"""RabbitMQ consumer mode in Celery: real beats and workers (``celery beat``, ``celery worker``).

Each test has its own queue prefix (run, dead and gate queues) and its own default Celery queue,
deleted afterwards. Beats win each run through the gate and publish it to the job's quorum run
queue; prefork workers (one child each) consume it with late acks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pika
import pytest

from relay import open_backend
from relay.backends.rabbitmq_consumer import RabbitMQConsumerBackend
from relay.errors import ConfigurationError
from tests.celery_integration.cluster import Cluster
from tests.support import services
from tests.support.backends import unique

pytestmark = [pytest.mark.rabbitmq, pytest.mark.slow]
APP = "tests.celery_integration.consumer_app"
ROOT = Path(__file__).resolve().parents[2]


class ConsumerCluster(Cluster):
    """A :class:`Cluster` running the consumer-mode app, with a fence file."""

    def __init__(self, tmp: Path, broker: str, backend: str, schedule: dict[str, Any]) -> None:
        super().__init__(tmp, broker, backend, schedule)
        self.env["RELAY_T_FENCE"] = str(tmp / "fence.db")
        self.env["RELAY_T_HEARTBEAT_S"] = "10"

    def worker(self, pool: str = "prefork", concurrency: int = 1) -> subprocess.Popen[bytes]:
        """A prefork worker with one child by default."""
        return super().worker(pool, concurrency)

    def _start(self, kind: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{kind}{len(self.processes)}.log", "wb")  # noqa: SIM115
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", APP, *args, "-l", "INFO"],
            cwd=self.tmp, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        self.processes.append(process)
        return process

    def ready(self, count: int) -> None:
        """Wait until ``count`` workers logged that they are ready."""

        def readies() -> bool:
            logs = [p.read_text(errors="replace") for p in self.tmp.glob("worker*.log")]
            return sum("ready." in text for text in logs) >= count

        self.wait_for(f"{count} worker(s) ready", readies)


@pytest.fixture
def amqp() -> str:
    return services.require("rabbitmq")


@pytest.fixture
def prefix(amqp: str) -> Iterator[str]:
    name = unique("relay_c")
    yield name
    connection = pika.BlockingConnection(pika.URLParameters(amqp))
    channel = connection.channel()
    for job in ("tick", "flaky", "slow", "first"):
        for kind in ("run", "dead"):
            channel.queue_delete(f"{name}.{kind}.{job}")
    channel.queue_delete(f"{name}.outcomes")
    connection.close()


@contextmanager
def make_cluster(
    tmp: Path, amqp: str, prefix: str, schedule: dict[str, Any]
) -> Iterator[ConsumerCluster]:
    url = f"{amqp}?mode=consumer&prefix={prefix}&retention=120"
    running = ConsumerCluster(tmp, amqp, url, schedule)
    try:
        yield running
    finally:
        running.stop()
        connection = pika.BlockingConnection(pika.URLParameters(amqp))
        connection.channel().queue_delete(running.queue)
        connection.close()


def consumer(amqp: str, prefix: str) -> RabbitMQConsumerBackend:
    backend = open_backend(f"{amqp}?mode=consumer&prefix={prefix}&retention=120")
    assert isinstance(backend, RabbitMQConsumerBackend)
    return backend


def by_run(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        grouped[event["run"]].append(event)
    return grouped


def test_a_killed_pool_child_s_run_is_redelivered_and_completed(
    tmp_path: Path, amqp: str, prefix: str
) -> None:
    schedule = {"first": {"every": 30, "kwargs": {"sleep_first": 20}}}
    with make_cluster(tmp_path, amqp, prefix, schedule) as cluster:
        cluster.worker()
        cluster.worker()
        cluster.ready(2)
        cluster.beat()
        cluster.wait_for("a run to start", lambda: cluster.events("start"), 60)
        first = cluster.events("start")[0]
        os.kill(first["pid"], signal.SIGKILL)  # the pool child, mid-run
        cluster.wait_for("the run to end", lambda: cluster.events("end"), 60)
        starts = [
            (e["run"], e["attempt"], e["token"])
            for e in by_run(cluster.events())[first["run"]]
            if e["event"] == "start"
        ]
        assert starts == [
            (first["run"], 1, first["token"]),
            (first["run"], 2, first["token"] + 1),
        ], cluster.logs()
        (end,) = ended(cluster, first["run"])
        assert (end["attempt"], end["fenced"]) == (2, True)
        assert end["pid"] != first["pid"]
        backend = consumer(amqp, prefix)
        try:
            (record,) = [r for r in backend.runs("first") if r.id == first["run"]]
        finally:
            backend.close()
        # The killed attempt recorded nothing; the dead runner counts as a failure.
        assert (record.state, record.attempt, record.failures) == ("succeeded", 2, 1)


def test_a_failing_run_is_dead_lettered_after_its_job_s_own_limit(
    tmp_path: Path, amqp: str, prefix: str
) -> None:
    schedule = {"flaky": {"every": 5, "kwargs": {"fail": True}, "relay": {"max_attempts": 2}}}
    backend = consumer(amqp, prefix)
    try:
        with make_cluster(tmp_path, amqp, prefix, schedule) as cluster:
            cluster.worker()
            cluster.ready(1)
            cluster.beat()
            cluster.wait_for("a dead letter", lambda: backend.dead_runs("flaky"), 60)
            dead = backend.dead_runs("flaky")[0]
            assert dead.outcome == "failed"
            starts = by_run(cluster.events("start"))[dead.run_id]
            assert [e["attempt"] for e in starts] == [1, 2]
            assert starts[1]["token"] == starts[0]["token"] + 1
            record = next(r for r in backend.runs("flaky") if r.id == dead.run_id)
            assert (record.state, record.attempt, record.token) == ("failed", 2, starts[1]["token"])
            assert record.error == "RuntimeError: this task always fails"
    finally:
        backend.close()


def test_a_run_waiting_past_stale_after_is_dead_lettered_as_skipped(
    tmp_path: Path, amqp: str, prefix: str
) -> None:
    schedule = {"slow": {"every": 2, "kwargs": {"sleep": 12}, "relay": {"stale_after": 5}}}
    backend = consumer(amqp, prefix)
    try:
        with make_cluster(tmp_path, amqp, prefix, schedule) as cluster:
            cluster.worker()
            cluster.ready(1)
            cluster.beat()
            cluster.wait_for("a dead letter", lambda: backend.dead_runs("slow"), 60)
            dead = backend.dead_runs("slow")
            assert {d.outcome for d in dead} == {"skipped"}
            started = {e["run"] for e in cluster.events("start")}
            assert not started & {d.run_id for d in dead}  # a stale run never runs
    finally:
        backend.close()


def test_a_graceful_worker_stop_keeps_the_attempt(tmp_path: Path, amqp: str, prefix: str) -> None:
    schedule = {"slow": {"every": 30, "kwargs": {"sleep_first": 6}}}
    with make_cluster(tmp_path, amqp, prefix, schedule) as cluster:
        first = cluster.worker()
        cluster.ready(1)  # the first subscribed is the run queue's single active consumer
        cluster.worker()
        cluster.ready(2)
        cluster.beat()
        cluster.wait_for("a run to start", lambda: cluster.events("start"), 60)
        os.kill(first.pid, signal.SIGTERM)  # warm shutdown: finish the run, then leave
        cluster.wait_for("the run to end", lambda: cluster.events("end"), 60)
        assert first.wait(30) == 0
        time.sleep(3)  # a redelivery, if the stop had returned the run, would start by now
        run = cluster.events("start")[0]["run"]
        (start,) = [e for e in cluster.events("start") if e["run"] == run]
        (end,) = [e for e in cluster.events("end") if e["run"] == run]
        assert (start["attempt"], end["attempt"], end["run"]) == (1, 1, start["run"])
        assert end["fenced"] is True


def test_three_beats_two_workers_a_beat_and_a_pool_child_killed(
    tmp_path: Path, amqp: str, prefix: str
) -> None:
    schedule = {"tick": {"every": 2, "kwargs": {"sleep": 0.8}}}
    with make_cluster(tmp_path, amqp, prefix, schedule) as cluster:
        cluster.worker()
        cluster.worker()
        cluster.ready(2)
        beats = [cluster.beat() for _ in range(3)]
        cluster.wait_for("three runs", lambda: len(cluster.events("end")) >= 3, 90)
        cluster.wait_for("a run in progress", lambda: _running(cluster), 30)
        victim = _running(cluster)[-1]
        os.kill(victim["pid"], signal.SIGKILL)  # a pool child, mid-run
        cluster.kill(beats[0])  # a beat, with its process group
        ended = len(cluster.events("end"))
        cluster.wait_for("four more runs", lambda: len(cluster.events("end")) >= ended + 4, 90)
        for beat in beats[1:]:
            cluster.kill(beat)
        cluster.wait_quiet(4)
        runs = by_run(cluster.events())
    assert [e["attempt"] for e in runs[victim["run"]] if e["event"] == "start"] == [1, 2]
    slots = sorted(runs)
    every_slot = _slots_between(slots[0], slots[-1], 2)
    assert sorted(runs) == every_slot, "a slot was lost"
    for run, events in runs.items():
        starts = [e for e in events if e["event"] == "start"]
        ends = [e for e in events if e["event"] == "end"]
        assert len(ends) == 1 and ends[0]["fenced"] is True, (run, events)
        if len(starts) > 1:  # only the killed child's attempt runs twice
            assert [e["pid"] for e in starts[:-1]] == [victim["pid"]], (run, events)
            assert starts[-1]["token"] > starts[0]["token"]
        assert ends[0]["token"] == max(e["token"] for e in starts)


def _running(cluster: ConsumerCluster) -> list[dict[str, Any]]:
    ended = {e["run"] for e in cluster.events("end")}
    return [e for e in cluster.events("start") if e["run"] not in ended]


def _slots_between(first: str, last: str, every: int) -> list[str]:
    from datetime import timedelta

    from relay.runs import parse_run_id, run_id

    job, start = parse_run_id(first)
    _, end = parse_run_id(last)
    count = int((end - start).total_seconds()) // every
    return [run_id(job, start + timedelta(seconds=every * i)) for i in range(count + 1)]


def test_a_frozen_worker_s_fenced_write_is_refused_after_the_redelivery(
    tmp_path: Path, amqp: str, prefix: str
) -> None:
    schedule = {"first": {"every": 30, "kwargs": {"sleep_first": 10}}}
    with make_cluster(tmp_path, amqp, prefix, schedule) as cluster:
        cluster.set(heartbeat_s=2)  # the workers' AMQP heartbeat: a frozen one is dropped fast
        frozen = cluster.worker()
        cluster.ready(1)
        cluster.worker()
        cluster.ready(2)
        cluster.set(heartbeat_s=10)
        cluster.beat()
        cluster.wait_for("a run to start", lambda: cluster.events("start"), 60)
        run = cluster.events("start")[0]["run"]
        cluster.kill(frozen, signal.SIGSTOP)  # the worker and its child, past the heartbeat
        cluster.wait_for("the redelivery to end", lambda: cluster.events("end"), 60)
        cluster.kill(frozen, signal.SIGCONT)
        cluster.wait_for("the frozen child to end", lambda: len(ended(cluster, run)) == 2, 60)
        first, second = [e for e in cluster.events("start") if e["run"] == run][:2]
        ends = [(e["attempt"], e["token"], e["fenced"]) for e in ended(cluster, run)]
    assert second["token"] == first["token"] + 1
    assert ends == [(2, second["token"], True), (1, first["token"], False)]


def ended(cluster: ConsumerCluster, run: str) -> list[dict[str, Any]]:
    return [e for e in cluster.events("end") if e["run"] == run]


def test_an_app_whose_broker_is_not_that_rabbitmq_is_refused(amqp: str, prefix: str) -> None:
    from celery import Celery

    from relay_celery.consumer import check_broker

    backend = consumer(amqp, prefix)
    try:
        check_broker(Celery(broker=amqp), backend)  # the same broker: accepted
        with pytest.raises(ConfigurationError, match="the app's broker is redis"):
            check_broker(Celery(broker="redis://127.0.0.1:6379/0"), backend)
        with pytest.raises(ConfigurationError, match="virtual host '/', but the app's broker"):
            check_broker(Celery(broker="amqp://guest:guest@127.0.0.1:5672/other"), backend)
    finally:
        backend.close()

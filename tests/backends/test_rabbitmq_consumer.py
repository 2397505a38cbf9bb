"""RabbitMQ consumer mode against the real broker, with real scheduler processes killed by SIGKILL.

Each test uses its own queue prefix. Most runs are published by the test (``publish``, what the
gate's winner does) to processes that only consume; in the tests of the scheduler's own runs
(``every=``), the processes' ticks race through the gate queues and publish what they win, and
their consumers run it from the run queue.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pika
import pytest
from click.testing import CliRunner

from relay import Run, Scheduler, open_backend
from relay.backends.rabbitmq_consumer import RabbitMQConsumerBackend
from relay.cli import main
from relay.errors import ConfigurationError, StoreNotFound
from relay.jobs import make_job
from relay.runs import RunState, run_id
from tests.support import services
from tests.support.backends import unique
from tests.support.procs import ROOT

pytestmark = pytest.mark.rabbitmq
UTC = timezone.utc
JOB = "consumer-job"


@pytest.fixture
def url() -> Iterator[str]:
    base = services.require("rabbitmq")
    prefix = unique()
    yield f"{base}?mode=consumer&prefix={prefix}&retention=120"
    connection = pika.BlockingConnection(pika.URLParameters(base))
    channel = connection.channel()
    for kind in ("run", "dead"):
        channel.queue_delete(f"{prefix}.{kind}.{JOB}")
    channel.queue_delete(f"{prefix}.outcomes")
    connection.close()


@pytest.fixture
def backend(url: str) -> Iterator[RabbitMQConsumerBackend]:
    opened = open_backend(url)
    assert isinstance(opened, RabbitMQConsumerBackend)
    yield opened
    opened.close()


def a_run(seconds_ago: float = 0) -> Run:
    slot = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=seconds_ago)
    return Run(run_id(JOB, slot), JOB, slot, 1, 0, "test")


def spawn(url: str, log: Path, **args: Any) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}
    payload = json.dumps({"url": url, "job": JOB, "log": str(log), **args})
    return subprocess.Popen(
        [sys.executable, "-m", "tests.backends.rabbitmq_consumer_proc", payload],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    stderr = ""
    if proc.stderr is not None:
        stderr = proc.stderr.read().decode()
        proc.stderr.close()
    assert proc.returncode in (0, -signal.SIGKILL), stderr


def wait_for(condition: Callable[[], object], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def events(log: Path, kind: str | None = None) -> list[dict[str, Any]]:
    """The events the processes wrote (of one kind), in order."""
    if not log.exists():
        return []
    lines = [json.loads(line) for line in log.read_text().splitlines() if line]
    return [e for e in lines if kind is None or e["event"] == kind]


def ready(proc: subprocess.Popen[bytes], log: Path) -> None:
    """Wait until the process's consumers are subscribed."""
    wait_for(lambda: proc.pid in {e["pid"] for e in events(log, "ready")}, "a consumer")


def test_max_attempts_in_the_url_is_checked() -> None:
    base = "amqp://guest:guest@127.0.0.1:5672/%2F"
    with pytest.raises(ConfigurationError, match="max_attempts='0'"):
        open_backend(f"{base}?mode=consumer&max_attempts=0")
    with pytest.raises(ConfigurationError, match="does not know the URL option"):
        open_backend(f"{base}?mode=consumer&overlap=skip")


@pytest.mark.slow
def test_a_consumer_killed_mid_run_is_replaced_and_the_run_completes_once(
    url: str, backend: RabbitMQConsumerBackend, tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    first = spawn(url, log, sleep=3)
    ready(first, log)
    second = spawn(url, log, sleep=3)
    ready(second, log)
    run = a_run()
    backend.publish(run)
    wait_for(lambda: events(log, "start"), "the run to start")
    assert [e["pid"] for e in events(log, "start")] == [first.pid]  # the active consumer
    os.kill(first.pid, signal.SIGKILL)
    wait_for(lambda: events(log, "end"), "the run to finish")
    time.sleep(1)
    stop(second)
    stop(first)
    starts = [(e["pid"], e["attempt"]) for e in events(log, "start")]
    assert starts == [(first.pid, 1), (second.pid, 2)]
    ends = [(e["run"], e["pid"], e["attempt"]) for e in events(log, "end")]
    assert ends == [(run.id, second.pid, 2)]


@pytest.mark.slow
def test_a_run_that_always_fails_is_dead_lettered_as_failed_after_max_attempts(
    url: str, tmp_path: Path
) -> None:
    backend = open_backend(url + "&max_attempts=3")
    assert isinstance(backend, RabbitMQConsumerBackend)
    log = tmp_path / "log.jsonl"
    worker = spawn(url + "&max_attempts=3", log, fail=True)
    try:
        ready(worker, log)
        run = a_run()
        backend.publish(run)
        wait_for(lambda: backend.dead_runs(JOB), "the run to be dead-lettered")
        assert [(d.run_id, d.outcome) for d in backend.dead_runs(JOB)] == [(run.id, "failed")]
        assert [e["attempt"] for e in events(log, "start")] == [1, 2, 3]
        assert events(log, "end") == []
    finally:
        stop(worker)
        backend.close()


@pytest.mark.slow
def test_a_run_waiting_past_stale_after_is_dead_lettered_as_skipped(
    url: str, backend: RabbitMQConsumerBackend, tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    worker = spawn(url, log, sleep=4)
    try:
        ready(worker, log)
        busy = a_run(seconds_ago=1)
        backend.publish(busy)
        wait_for(lambda: events(log, "start"), "the first run to start")
        stale = a_run(seconds_ago=59)
        backend.publish(stale, stale_after=60)  # waits behind the busy run, expires in ~1 s
        wait_for(lambda: backend.dead_runs(JOB), "the stale run to be dead-lettered")
        assert [(d.run_id, d.outcome) for d in backend.dead_runs(JOB)] == [(stale.id, "skipped")]
        wait_for(lambda: events(log, "end"), "the first run to end")
        time.sleep(1)
        assert [e["run"] for e in events(log) if e["run"]] == [busy.id, busy.id]
    finally:
        stop(worker)


@pytest.mark.slow
def test_two_consumers_run_the_jobs_runs_one_at_a_time(
    url: str, backend: RabbitMQConsumerBackend, tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    workers = [spawn(url, log, sleep=1)]
    ready(workers[0], log)
    workers.append(spawn(url, log, sleep=1))
    ready(workers[1], log)
    try:
        for seconds_ago in (3, 2, 1):
            backend.publish(a_run(seconds_ago))
        wait_for(lambda: len(events(log, "end")) == 3, "three runs to finish")
    finally:
        for worker in workers:
            stop(worker)
    ends = {e["run"]: e["at"] for e in events(log, "end")}
    spans = sorted((e["at"], ends[e["run"]], e["pid"]) for e in events(log, "start"))
    assert len(spans) == 3
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans))
    assert {pid for _, _, pid in spans} == {workers[0].pid}  # the single active consumer


@pytest.mark.slow
def test_schedulers_race_through_the_gate_and_each_run_runs_once(url: str, tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    workers = [spawn(url, log, every=1) for _ in range(3)]
    try:
        wait_for(lambda: len(events(log, "end")) >= 4, "four runs")
    finally:
        for worker in workers:
            stop(worker)
    ends = [e["run"] for e in events(log, "end")]
    assert len(ends) == len(set(ends))


def test_a_run_s_events_reach_the_scheduler_s_hooks_in_consumer_mode(
    url: str, backend: RabbitMQConsumerBackend, tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    worker = spawn(url, log)
    try:
        ready(worker, log)
        run = a_run()
        backend.publish(run)
        wait_for(lambda: events(log, "end"), "the run")
        # The runner's events are emitted after the handler returns.
        wait_for(lambda: {"succeeded"} <= {e["type"] for e in events(log, "relay")}, "its events")
    finally:
        stop(worker)
    seen = [e["type"] for e in events(log, "relay") if e["run_id"] == run.id]
    assert seen == ["started", "succeeded"]


def test_a_queue_declared_with_other_attempts_is_refused_naming_the_fix(
    url: str, backend: RabbitMQConsumerBackend
) -> None:
    backend.check_jobs([make_job(backend, name=JOB, every=60, max_attempts=2)])
    other = open_backend(url)
    assert isinstance(other, RabbitMQConsumerBackend)
    try:
        with pytest.raises(ConfigurationError) as refused:
            other.check_jobs([make_job(other, name=JOB, every=60, max_attempts=4)])
    finally:
        other.close()
    message = str(refused.value)
    assert f"job {JOB!r} has max_attempts=4" in message
    assert "set max_attempts=2 on the job, or delete the queue" in message


@pytest.mark.slow
def test_a_job_s_own_max_attempts_is_its_queue_s_delivery_limit(
    url: str, backend: RabbitMQConsumerBackend, tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    worker = spawn(url, log, fail=True, max_attempts=2)  # the URL's default is 3
    try:
        ready(worker, log)
        run = a_run()
        backend.publish(run, max_attempts=2)
        wait_for(lambda: backend.dead_runs(JOB), "the run to be dead-lettered")
        assert [(d.run_id, d.outcome) for d in backend.dead_runs(JOB)] == [(run.id, "failed")]
        starts = events(log, "start")
        assert [e["attempt"] for e in starts] == [1, 2]
        assert starts[1]["token"] == starts[0]["token"] + 1
        (record,) = backend.runs(JOB)  # the outcomes stream, the dead letter on top
        assert (record.id, record.state, record.attempt, record.token) == (
            run.id, RunState.FAILED, 2, starts[1]["token"],
        )  # fmt: skip
        assert (record.reason, record.error) == (
            "attempts used",
            "RuntimeError: this job always fails",
        )
    finally:
        stop(worker)


@pytest.mark.slow
def test_a_graceful_stop_hands_the_run_over_without_using_an_attempt(
    url: str, backend: RabbitMQConsumerBackend, tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    first = spawn(url, log, sleep=4, stop_timeout=0.5)
    ready(first, log)
    second = spawn(url, log, sleep=4)
    ready(second, log)
    try:
        run = a_run()
        backend.publish(run)
        wait_for(lambda: events(log, "start"), "the run to start")
        first.send_signal(signal.SIGTERM)
        wait_for(lambda: events(log, "end"), "the run to finish")
        assert first.wait(30) == 0
        starts = [(e["pid"], e["attempt"]) for e in events(log, "start")]
        assert starts == [(first.pid, 1), (second.pid, 1)]
        tokens = [e["token"] for e in events(log, "start")]
        assert tokens[1] > tokens[0]
        assert [(e["pid"], e["attempt"]) for e in events(log, "end")] == [(second.pid, 1)]
        assert backend.dead_runs(JOB) == []
        wait_for(lambda: backend.runs(JOB)[0].state is RunState.SUCCEEDED, "the outcome")
        (record,) = backend.runs(JOB)
        assert (record.attempt, record.failures, record.token) == (1, 0, tokens[1])
    finally:
        stop(second)
        stop(first)


@pytest.mark.slow
def test_a_frozen_consumer_s_fenced_write_is_refused_after_the_redelivery(
    url: str, backend: RabbitMQConsumerBackend, tmp_path: Path
) -> None:
    log, fence = tmp_path / "log.jsonl", str(tmp_path / "fence.db")
    fast = url + "&heartbeat=2"  # the broker drops a frozen consumer after ~2 missed beats
    frozen = spawn(fast, log, sleep_first=8, fence=fence)
    ready(frozen, log)
    other = spawn(fast, log, sleep_first=8, fence=fence)
    ready(other, log)
    try:
        run = a_run()
        backend.publish(run)
        wait_for(lambda: events(log, "start"), "the run to start")
        os.kill(frozen.pid, signal.SIGSTOP)
        wait_for(lambda: events(log, "end"), "the redelivery to finish")
        os.kill(frozen.pid, signal.SIGCONT)
        wait_for(lambda: len(events(log, "end")) == 2, "the frozen consumer to wake")
        first, second = events(log, "start")
        assert (first["pid"], second["pid"]) == (frozen.pid, other.pid)
        assert (second["attempt"], second["token"]) == (2, first["token"] + 1)
        ends = [(e["pid"], e["token"], e["fenced"]) for e in events(log, "end")]
        assert ends == [(other.pid, second["token"], True), (frozen.pid, first["token"], False)]
    finally:
        stop(other)
        stop(frozen)


def test_relay_runs_reads_the_outcomes_and_creates_nothing(
    url: str, backend: RabbitMQConsumerBackend
) -> None:
    runner = CliRunner()
    missing = runner.invoke(main, ["runs", "--backend", url])
    assert missing.exit_code == 1 and "no outcomes stream" in missing.output
    channel = pika.BlockingConnection(pika.URLParameters(services.require("rabbitmq"))).channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):  # still not declared
        channel.queue_declare(backend.outcomes.name, passive=True)
    channel.connection.close()
    ok, failed = a_run(seconds_ago=2), a_run(seconds_ago=1)
    assert backend.record(dataclasses.replace(ok, token=7), RunState.SUCCEEDED)
    assert backend.record(failed, RunState.PENDING, error="ValueError: once")
    assert backend.record(dataclasses.replace(failed, attempt=2), RunState.SUCCEEDED)
    shown = runner.invoke(main, ["runs", "--backend", url, "--json"])
    assert shown.exit_code == 0, shown.output
    rows = [(r["id"], r["state"], r["attempt"], r["failures"]) for r in json.loads(shown.output)]
    assert rows == [(failed.id, "succeeded", 2, 1), (ok.id, "succeeded", 1, 0)]


def recorded(backend: RabbitMQConsumerBackend) -> list[Any]:
    """The outcomes recorded so far (none before the stream exists)."""
    try:
        return backend.runs(JOB)
    except StoreNotFound:
        return []


def succeeded(backend: RabbitMQConsumerBackend, run: str) -> bool:
    return any(r.id == run and r.state is RunState.SUCCEEDED for r in recorded(backend))


@pytest.mark.slow
def test_a_scheduler_hands_the_runs_it_wins_to_the_run_queue(
    url: str, backend: RabbitMQConsumerBackend, tmp_path: Path
) -> None:
    # Scheduler.run(): what the tick wins is published; the scheduler's own threads never run it:
    # the run comes back from the queue with a stamped token, and the consumer records its outcome.
    log = tmp_path / "log.jsonl"
    worker = spawn(url, log, every=1)
    try:
        wait_for(lambda: events(log, "end"), "a run")
        first = events(log, "end")[0]
        wait_for(lambda: succeeded(backend, first["run"]), "its outcome in the outcomes stream")
    finally:
        stop(worker)
    assert first["token"] > 0, first  # a stamped token base: it came through the run queue
    kinds = {e["type"] for e in events(log, "relay") if e["run_id"] == first["run"]}
    assert {"dispatched", "started", "succeeded"} <= kinds, kinds
    shown = CliRunner().invoke(main, ["runs", "--backend", url, "--job", JOB, "--json"])
    assert shown.exit_code == 0, shown.output
    assert first["run"] in {r["id"] for r in json.loads(shown.output) if r["state"] == "succeeded"}


@pytest.mark.slow
def test_a_run_pending_loop_runs_its_jobs_through_the_run_queue(
    url: str, backend: RabbitMQConsumerBackend
) -> None:
    # run_pending() publishes what it wins; its first call starts this process's consumers, which
    # run the runs in the background, so a run_pending() loop runs the job (and records it).
    scheduler = Scheduler(url, tick=0.2, stop_timeout=5)
    ran: list[Run] = []
    scheduler.job(name=JOB, every=0.5)(ran.append)
    won: list[Run] = []
    try:
        deadline = time.monotonic() + 60
        while len(ran) < 2:
            assert time.monotonic() < deadline, "timed out waiting for two runs"
            won += scheduler.run_pending()
            time.sleep(0.1)
    finally:
        scheduler.shutdown()
        scheduler.backend.close()
    assert all(run.token > 0 for run in ran), ran  # each came from the run queue, stamped
    assert {run.id for run in ran} <= {run.id for run in won}
    wait_for(lambda: succeeded(backend, ran[0].id), "its outcome in the outcomes stream")


@pytest.mark.slow
def test_serve_hands_the_runs_it_wins_to_the_run_queue(
    url: str, backend: RabbitMQConsumerBackend
) -> None:
    scheduler = Scheduler(url, tick=0.2, stop_timeout=5)
    ran: list[Run] = []
    scheduler.job(name=JOB, every=0.5)(ran.append)

    async def main() -> None:
        async with scheduler:
            deadline = time.monotonic() + 60
            while not ran:
                assert time.monotonic() < deadline, "timed out waiting for a run"
                await asyncio.sleep(0.1)

    asyncio.run(main())
    assert ran[0].token > 0, ran  # from the run queue
    wait_for(lambda: succeeded(backend, ran[0].id), "its outcome in the outcomes stream")


@pytest.mark.slow
def test_a_scheduled_run_whose_consumer_is_killed_is_redelivered_to_another_instance(
    url: str, backend: RabbitMQConsumerBackend, tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    first = spawn(url, log, every=3, sleep=4)
    ready(first, log)
    second = spawn(url, log, every=3, sleep=4)  # subscribed second: the backup
    ready(second, log)
    try:
        wait_for(lambda: events(log, "start"), "a run to start")
        killed = events(log, "start")[0]
        assert killed["pid"] == first.pid  # the single active consumer, whoever published it
        os.kill(first.pid, signal.SIGKILL)
        wait_for(
            lambda: any(e["run"] == killed["run"] for e in events(log, "end")),
            "the run to finish on the other instance",
        )
        wait_for(lambda: succeeded(backend, killed["run"]), "its outcome")
    finally:
        stop(second)
        stop(first)
    starts = [(e["pid"], e["attempt"]) for e in events(log, "start") if e["run"] == killed["run"]]
    assert starts == [(first.pid, 1), (second.pid, 2)]
    ends = [(e["pid"], e["attempt"]) for e in events(log, "end") if e["run"] == killed["run"]]
    assert ends == [(second.pid, 2)]
    record = next(r for r in backend.runs(JOB) if r.id == killed["run"])
    assert (record.state, record.attempt) == (RunState.SUCCEEDED, 2)


@pytest.mark.slow
def test_a_scheduled_run_that_always_fails_is_dead_lettered_at_its_delivery_limit(
    url: str, backend: RabbitMQConsumerBackend, tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    worker = spawn(url, log, every=2, fail=True, max_attempts=2)
    try:
        wait_for(lambda: backend.dead_runs(JOB), "a run to be dead-lettered")
    finally:
        stop(worker)
    dead = backend.dead_runs(JOB)[0]
    assert dead.outcome == "failed", dead
    assert [e["attempt"] for e in events(log, "start") if e["run"] == dead.run_id] == [1, 2]
    assert events(log, "end") == []
    record = next(r for r in backend.runs(JOB) if r.id == dead.run_id)
    assert (record.state, record.attempt) == (RunState.FAILED, 2)

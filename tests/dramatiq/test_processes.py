"""Real ``dramatiq`` workers and ``relay-dramatiq`` schedulers, on Redis and RabbitMQ brokers.

Each test gets its own broker namespace or queue and its own Relay store (every lease backend in
``tests/support/backends.py``), starts processes, and reads what the actors reported and what the
store recorded. Concurrency is real: separate processes, killed with SIGKILL.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from relay.runs import RunState, parse_run_id
from tests.dramatiq.procs import Deployment
from tests.support import services
from tests.support.backends import LEASE_BACKENDS, unique
from tests.support.fault_proxy import proxied
from tests.support.slots import one_slot_behind

pytestmark = pytest.mark.slow


@contextmanager
def _redis_broker(queue: str) -> Iterator[str]:
    import redis

    url = services.require("redis")
    try:
        yield url
    finally:
        client = redis.Redis.from_url(url)
        keys = list(client.scan_iter(match=f"{queue}*"))
        if keys:
            client.delete(*keys)
        client.close()


@contextmanager
def _rabbitmq_broker(queue: str) -> Iterator[str]:
    import pika

    url = services.require("rabbitmq")
    try:
        yield url
    finally:
        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        for name in (queue, f"{queue}.DQ", f"{queue}.XQ"):
            channel.queue_delete(name)
        connection.close()


BROKERS = {"redis": _redis_broker, "rabbitmq": _rabbitmq_broker}
BROKER_MARKS = {"redis": [pytest.mark.redis], "rabbitmq": [pytest.mark.rabbitmq]}


def combos(brokers: list[str], *, every_backend_on: str | None = None) -> list[Any]:
    """SQLite on each broker in ``brokers``, plus every other lease backend on one broker."""
    result = [
        pytest.param((broker, "sqlite"), marks=BROKER_MARKS[broker], id=f"{broker}-sqlite")
        for broker in brokers
    ]
    if every_backend_on is not None:
        for name, (_, marks) in LEASE_BACKENDS.items():
            if name != "sqlite":
                result.append(
                    pytest.param(
                        (every_backend_on, name), marks=[*BROKER_MARKS[every_backend_on], *marks],
                        id=f"{every_backend_on}-{name}",
                    )
                )  # fmt: skip
    return result


@pytest.fixture
def deploy(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A factory of one isolated deployment for this test (broker and backend from params)."""
    broker, backend = request.param
    with ExitStack() as stack:
        queue = unique("relay_dq")
        broker_url = stack.enter_context(BROKERS[broker](queue))
        factory, _ = LEASE_BACKENDS[backend]
        backend_url = stack.enter_context(factory(tmp_path))
        made: list[Deployment] = []

        def make(jobs: dict[str, dict[str, Any]], lease: str = "2,0.5,10") -> Deployment:
            d = Deployment(tmp_path, broker, broker_url, queue, backend_url, jobs, lease)
            made.append(d)
            return d

        try:
            yield make
        finally:
            for d in made:
                d.close()


def slots_of(run_ids: list[str]) -> list[float]:
    return sorted(parse_run_id(r)[1].timestamp() for r in run_ids)


def assert_contiguous(slots: list[float], step: float, d: Deployment) -> None:
    gaps = [b - a for a, b in itertools.pairwise(slots)]
    assert all(abs(g - step) < 1e-6 for g in gaps), f"slots not contiguous: {slots}\n{d.logs()}"


def settled(d: Deployment, job: str) -> bool:
    """Every recorded run of ``job`` is final, and at least one exists."""
    runs = d.runs(job)
    return bool(runs) and all(r.state.final for r in runs)


@pytest.mark.parametrize(
    "deploy", combos(["redis", "rabbitmq"], every_backend_on="redis"), indirect=True
)
def test_racing_schedulers_enqueue_and_run_each_run_once(deploy: Any) -> None:
    d: Deployment = deploy({"tick": {"every": 1, "sleep": 0.1}})
    worker = d.worker("worker", threads=4)
    schedulers = [d.scheduler(f"scheduler{i}") for i in range(3)]
    d.wait_for("runs to be enqueued", lambda: len(d.enqueued()) >= 2)
    d.kill(schedulers[0])  # a scheduler killed mid-flight costs nothing
    before = len(d.enqueued())
    d.wait_for("runs after the kill", lambda: len(d.enqueued()) >= before + 2)
    for proc in schedulers[1:]:
        assert d.stop(proc) == 0, d.logs()  # SIGTERM stops a scheduler cleanly
    d.wait_for("every run to finish", lambda: settled(d, "tick"))
    d.stop(worker)

    starts = Counter(e["run"] for e in d.events("start"))
    enqueued = Counter(d.enqueued())
    assert starts and max(starts.values()) == 1, (starts, d.logs())
    assert max(enqueued.values()) == 1, enqueued
    assert set(starts) == set(enqueued)
    assert len(starts) >= before + 2, (starts, d.logs())
    assert_contiguous(slots_of(list(starts)), 1.0, d)
    assert all(r.state is RunState.SUCCEEDED for r in d.runs("tick"))


@pytest.mark.parametrize(
    "deploy", combos(["redis", "rabbitmq"], every_backend_on="redis"), indirect=True
)
def test_a_killed_worker_s_run_is_taken_over_and_completed_once(deploy: Any) -> None:
    d: Deployment = deploy({"slow": {**one_slot_behind(), "sleep_first": 60}})
    first = d.worker("worker-a", threads=1)
    d.scheduler("scheduler")
    d.wait_for("attempt 1 to start", lambda: d.events("start"))
    d.kill(first)
    d.worker("worker-b", threads=2)
    d.wait_for("the run to succeed", lambda: settled(d, "slow"))

    starts, dones = d.events("start"), d.events("done")
    assert [e["attempt"] for e in starts] == [1, 2], d.logs()
    assert starts[0]["pid"] != starts[1]["pid"] and starts[1]["token"] > starts[0]["token"]
    assert [e["attempt"] for e in dones] == [2], d.logs()
    [record] = d.runs("slow")
    assert (record.state, record.attempt, record.failures) == (RunState.SUCCEEDED, 2, 1)


@pytest.mark.parametrize("stuck", [False, True], ids=["interrupted", "stuck"])
@pytest.mark.parametrize("deploy", combos(["rabbitmq"]), indirect=True)
def test_a_gracefully_stopped_worker_hands_its_run_over(deploy: Any, stuck: bool) -> None:
    """Interrupted: Dramatiq raises Shutdown in the actor. Stuck: the actor ignores it (a long C
    call) and the worker hands the run over when it stops waiting."""
    d: Deployment = deploy({"handover": {**one_slot_behind(), "sleep_first": 60, "stuck": stuck}})
    first = d.worker("worker-a", threads=1, stop_ms=2000)
    d.scheduler("scheduler")
    d.wait_for("attempt 1 to start", lambda: d.events("start"))
    assert d.stop(first) == 0, d.logs()
    d.worker("worker-b", threads=1)
    d.wait_for("the run to succeed", lambda: settled(d, "handover"))

    assert [e["attempt"] for e in d.events("start")] == [1, 2], d.logs()
    assert [e["attempt"] for e in d.events("done")] == [2], d.logs()
    [record] = d.runs("handover")
    # A hand-over is not a failure: the run kept all its attempts.
    assert (record.state, record.failures) == (RunState.SUCCEEDED, 0)


def overlaps(d: Deployment) -> int:
    return sum(1 for r in d.runs("long") if r.reason == "overlap")


@pytest.mark.parametrize("deploy", combos(["redis"]), indirect=True)
def test_overlapping_runs_are_skipped(deploy: Any) -> None:
    d: Deployment = deploy({"long": {"every": 1, "overlap": "skip", "sleep": 1.6}})
    worker = d.worker("worker", threads=3)
    schedulers = [d.scheduler(f"scheduler{i}") for i in range(2)]
    d.wait_for("two overlap skips", lambda: overlaps(d) >= 2 and len(d.events("done")) >= 2)
    for proc in schedulers:
        assert d.stop(proc) == 0, d.logs()
    d.wait_for("every run to finish", lambda: settled(d, "long"))
    d.stop(worker)

    starts = sorted(d.events("start"), key=lambda e: e["t"])
    dones = {e["run"]: e["t"] for e in d.events("done")}
    assert len(starts) >= 2, d.logs()
    assert len({e["run"] for e in starts}) == len(starts)
    for before, after in itertools.pairwise(starts):
        assert after["t"] >= dones[before["run"]], f"{before['run']} overlapped {after['run']}"
    assert overlaps(d) >= 2


@pytest.mark.parametrize("deploy", combos(["redis"]), indirect=True)
def test_missed_runs_are_caught_up_after_downtime(deploy: Any) -> None:
    # catch_up well past the 3 s down: the second scheduler's start-up (seconds on a loaded
    # machine) must not push the first missed slots out of the window.
    d: Deployment = deploy({"catchup": {"every": 1, "catch_up": 30}})
    worker = d.worker("worker", threads=4)
    first = d.scheduler("scheduler1")
    d.wait_for("a first run", lambda: d.events("done"))
    time.sleep(1)
    assert d.stop(first) == 0, d.logs()
    down_from = time.time()
    time.sleep(3)  # nobody schedules: these slots are missed
    down_to = time.time()
    second = d.scheduler("scheduler2")
    d.wait_for("a run after the downtime", lambda: slots_of(d.enqueued())[-1] > down_to)
    assert d.stop(second) == 0, d.logs()
    d.wait_for("every run to finish", lambda: settled(d, "catchup"))
    d.stop(worker)

    ran = Counter(e["run"] for e in d.events("done"))
    assert max(ran.values()) == 1, ran
    slots = slots_of(list(ran))
    assert_contiguous(slots, 1.0, d)
    missed = [s for s in slots if down_from + 1 < s < down_to - 1]
    assert missed, (slots, down_from, down_to)
    assert slots[-1] - slots[0] >= timedelta(seconds=4).total_seconds()


@pytest.mark.parametrize("deploy", combos(["redis"]), indirect=True)
def test_failed_runs_are_retried_by_relay_up_to_max_attempts(deploy: Any) -> None:
    d: Deployment = deploy({"flaky": {**one_slot_behind(), "fail": True,
                                      "max_attempts": 2}})  # fmt: skip
    d.worker("worker", threads=2)
    d.scheduler("scheduler")
    d.wait_for("the run to fail for good", lambda: settled(d, "flaky"))
    time.sleep(1.5)  # room for a (wrong) Dramatiq retry to show up

    fails = d.events("fail")
    assert [e["attempt"] for e in fails] == [1, 2], d.logs()
    assert fails[1]["token"] > fails[0]["token"]
    [record] = d.runs("flaky")
    assert (record.state, record.failures) == (RunState.FAILED, 2)
    assert "Retrying message" not in d.logs()


@pytest.mark.parametrize("deploy", combos(["redis"]), indirect=True)
def test_a_message_that_outwaits_its_queue_lease_is_replaced_and_dropped(deploy: Any) -> None:
    d: Deployment = deploy({"queued": {**one_slot_behind()}}, lease="1,0.3,3")
    d.scheduler("scheduler")
    d.wait_for("the first dispatch", lambda: d.enqueued())
    # No worker yet: the queue lease (3 s) expires and the run is re-dispatched, newer token.
    d.wait_for("a re-dispatch", lambda: len(d.enqueued()) >= 2, timeout=30)
    d.worker("worker", threads=2)
    d.wait_for("the run to succeed", lambda: settled(d, "queued"))

    starts = d.events("start")
    assert len(starts) == 1, d.logs()
    [record] = d.runs("queued")
    assert record.state is RunState.SUCCEEDED and starts[0]["token"] == record.token > 1
    assert "refused the start of queued@" in d.logs()  # the first message was dropped


@pytest.mark.parametrize("deploy", combos(["redis"]), indirect=True)
def test_a_triggered_run_is_enqueued_and_run_once_by_racing_schedulers(deploy: Any) -> None:
    from relay import Control
    from relay.errors import StoreNotFound

    d: Deployment = deploy({"hourly": {"every": 3600, "sleep": 0.1}})
    worker = d.worker("worker", threads=2)
    schedulers = [d.scheduler(f"scheduler{i}") for i in range(3)]

    def registered() -> bool:
        try:
            with Control(d.backend, read_only=True) as control:
                return [job.name for job in control.jobs()] == ["hourly"]
        except StoreNotFound:  # no scheduler created the store yet
            return False

    d.wait_for("the job to be registered", registered)
    with Control(d.backend) as control:
        run_id = control.trigger("hourly").id
    d.wait_for("the manual run to finish", lambda: run_id in {e["run"] for e in d.events("done")})
    time.sleep(2)  # the schedulers sweep a few more times
    for proc in schedulers:
        assert d.stop(proc) == 0, d.logs()
    d.stop(worker)
    assert Counter(e["run"] for e in d.events("start"))[run_id] == 1, d.logs()
    assert Counter(d.enqueued())[run_id] == 1
    (record,) = [r for r in d.runs("hourly") if r.id == run_id]
    assert record.state is RunState.SUCCEEDED


@pytest.mark.parametrize(
    "deploy", [pytest.param(("redis", "redis"), marks=[pytest.mark.redis], id="redis-redis")],
    indirect=True,
)  # fmt: skip
def test_a_worker_cut_off_from_its_store_hands_back_the_runs_it_could_not_start(
    deploy: Any,
) -> None:
    # The scheduler reaches the store, the worker through a proxy that drops every packet for a
    # while: each start in that time goes unanswered, and nothing runs it. Once the proxy heals,
    # the worker hands those runs back and the scheduler's next sweep enqueues them again: every
    # slot runs once, long before the 120 s queue lease each was left with could run out.
    d: Deployment = deploy({"tick": {"every": 1, "catch_up": 3}}, lease="10,2,120")
    worker_log = d.tmp / "worker.log"
    with proxied(d.backend) as (proxy, near):
        direct, d.backend = d.backend, f"{near}&timeout=0.5"
        d.worker("worker", threads=1)
        d.backend = direct
        scheduler = d.scheduler("scheduler")
        d.wait_for("the first runs", lambda: len(d.events("done")) >= 2)
        proxy.set("drop")
        d.wait_for(
            "starts that went unanswered",
            lambda: worker_log.read_text(errors="replace").count("could not start") >= 3,
            timeout=30,
        )
        proxy.set("pass")
        healed = time.time()

        def caught_up() -> bool:
            done = sorted(set(slots_of([e["run"] for e in d.events("done")])))
            return done[-1] > healed and len(done) == done[-1] - done[0] + 1

        d.wait_for("every slot of the outage to run", caught_up, timeout=30)
        assert d.stop(scheduler) == 0, d.logs()
        time.sleep(2)  # what was enqueued last runs, or is dropped
    starts = Counter(e["run"] for e in d.events("start"))
    assert max(starts.values()) == 1, (starts, d.logs())
    assert_contiguous(slots_of(list(starts)), 1.0, d)
    logged = worker_log.read_text(errors="replace")
    assert "could not start it; it is handed back once the store answers" in logged
    assert "handed back now that the store answers" in logged

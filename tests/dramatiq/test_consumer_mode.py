"""RabbitMQ consumer mode under Dramatiq: real ``dramatiq`` workers and ``relay-dramatiq``
schedulers on the real broker, Relay's consumers running inside the worker processes."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from relay import open_backend
from relay.backends.rabbitmq_consumer import RabbitMQConsumerBackend
from relay.errors import ConfigurationError
from tests.dramatiq.procs import Deployment
from tests.support import services

pytestmark = [pytest.mark.rabbitmq, pytest.mark.slow]
APP = "tests.dramatiq.consumer_app"


class ConsumerDeployment(Deployment):
    """A :class:`Deployment` of the consumer-mode app."""

    def worker(self, name: str, threads: int = 1, stop_ms: int = 20000) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "dramatiq", APP, "-p", "1", "-t", str(threads)]
        return self._start(name, [*argv, "--worker-shutdown-timeout", str(stop_ms)])

    def scheduler(self, name: str) -> subprocess.Popen[bytes]:
        return self._start(name, [sys.executable, "-m", "relay_dramatiq", APP])

    def consuming(self, name: str) -> None:
        """Wait until the worker ``name`` logged that Relay's consumers are subscribed."""
        path = self.tmp / f"{name}.log"
        self.wait_for(
            f"{name} to consume", lambda: "consuming the run queues" in path.read_text(), 60
        )


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[ConsumerDeployment]:
    amqp = services.require("rabbitmq")
    prefix = f"relay_d_{secrets.token_hex(4)}"
    backend = f"{amqp}?mode=consumer&prefix={prefix}&retention=120"
    running = ConsumerDeployment(tmp_path, "rabbitmq", amqp, prefix, backend, {})
    yield running
    running.close()
    connection = pika.BlockingConnection(pika.URLParameters(amqp))
    channel = connection.channel()
    for queue in (prefix, f"{prefix}.DQ", f"{prefix}.XQ"):
        channel.queue_delete(queue)
    for job in running.jobs:
        for kind in ("run", "dead"):
            channel.queue_delete(f"{prefix}.{kind}.{job}")
    channel.queue_delete(f"{prefix}.outcomes")
    connection.close()


def consumer(deployment: Deployment) -> RabbitMQConsumerBackend:
    backend = open_backend(deployment.backend)
    assert isinstance(backend, RabbitMQConsumerBackend)
    return backend


def starts(deployment: Deployment, run: str) -> list[tuple[Any, ...]]:
    return [(e["pid"], e["attempt"]) for e in deployment.events("start") if e["run"] == run]


def test_a_killed_worker_s_run_is_redelivered_to_another_and_completed(
    deployment: ConsumerDeployment,
) -> None:
    deployment.jobs = {"dq_first": {"every": 30, "sleep_first": 20}}
    first = deployment.worker("worker0")
    deployment.consuming("worker0")
    second = deployment.worker("worker1")
    deployment.consuming("worker1")
    deployment.scheduler("scheduler0")
    (start,) = deployment.wait_for("a run to start", lambda: deployment.events("start"), 60)
    deployment.kill(first)  # the worker process and its children
    (end,) = deployment.wait_for("the run to end", lambda: deployment.events("end"), 60)
    assert end["run"] == start["run"]
    assert starts(deployment, start["run"])[0][1] == 1
    assert (end["attempt"], end["token"]) == (2, start["token"] + 1)
    assert end["pid"] != start["pid"] and second.poll() is None


def test_a_run_s_events_reach_the_middleware_s_hooks_in_the_worker(
    deployment: ConsumerDeployment,
) -> None:
    deployment.jobs = {"dq_hooked": {"every": 5}}
    deployment.worker("worker0")
    deployment.consuming("worker0")
    deployment.scheduler("scheduler0")
    end = deployment.wait_for("a run", lambda: deployment.events("end"), 60)[0]

    def hooked() -> list[str]:
        return [
            e["type"]
            for e in deployment.events("relay")
            if e["run"] == end["run"] and e["pid"] == end["pid"]
        ]

    deployment.wait_for("its events in the worker", lambda: "succeeded" in hooked(), 30)
    assert hooked() == ["started", "succeeded"]


def test_a_failing_run_is_dead_lettered_after_its_job_s_own_limit(
    deployment: ConsumerDeployment,
) -> None:
    deployment.jobs = {"dq_flaky": {"every": 5, "fail": True, "max_attempts": 2}}
    deployment.worker("worker0")
    deployment.consuming("worker0")
    deployment.scheduler("scheduler0")
    backend = consumer(deployment)
    try:
        dead = deployment.wait_for("a dead letter", lambda: backend.dead_runs("dq_flaky"), 60)
    finally:
        backend.close()
    assert dead[0].outcome == "failed"
    assert [attempt for _, attempt in starts(deployment, dead[0].run_id)] == [1, 2]


def test_an_async_periodic_actor_is_refused_in_consumer_mode(
    deployment: ConsumerDeployment,
) -> None:
    import dramatiq
    from dramatiq.brokers.stub import StubBroker

    import relay_dramatiq

    broker = StubBroker()
    middleware = relay_dramatiq.RelayMiddleware(deployment.backend)
    broker.add_middleware(middleware)
    try:

        async def tick() -> None:
            return None

        actor = dramatiq.actor(tick, broker=broker, actor_name="dq_async")
        with pytest.raises(ConfigurationError, match="is async, but RabbitMQ consumer mode"):
            relay_dramatiq.periodic(every=60)(actor)
    finally:
        middleware.backend.close()

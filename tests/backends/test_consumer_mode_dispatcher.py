"""RabbitMQ consumer mode's running half (``relay.consumer_mode``) as hosts reach it: only a
consumer-mode backend has a dispatcher, and every dispatcher of one backend serves through the
same consumers (Dramatiq asks for one at each hook)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from relay import Run, open_backend
from relay.backends.rabbitmq_consumer import RabbitMQConsumerBackend
from relay.consumer_mode import dispatcher
from relay.jobs import make_job
from tests.support import services
from tests.support.backends import unique
from tests.support.procs import ROOT

JOB = "dispatched-job"


def test_a_lease_store_has_no_dispatcher_and_pika_stays_unimported(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from relay import open_backend\n"
        "from relay.consumer_mode import dispatcher\n"
        f"backend = open_backend('sqlite:///{tmp_path / 'relay.db'}')\n"
        "print(dispatcher(backend), 'pika' in sys.modules)\n"
        "backend.close()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "False"]


@pytest.fixture
def consumer() -> Iterator[RabbitMQConsumerBackend]:
    base = services.require("rabbitmq")
    prefix = unique()
    backend = open_backend(f"{base}?mode=consumer&prefix={prefix}")
    assert isinstance(backend, RabbitMQConsumerBackend)
    yield backend
    backend.close()
    connection = pika.BlockingConnection(pika.URLParameters(base))
    channel = connection.channel()
    for queue in (f"{prefix}.run.{JOB}", f"{prefix}.dead.{JOB}", f"{prefix}.outcomes"):
        channel.queue_delete(queue)
    connection.close()


@pytest.mark.rabbitmq
def test_every_dispatcher_of_a_backend_serves_through_the_same_consumers(
    consumer: RabbitMQConsumerBackend,
) -> None:
    def handler(run: Run) -> None: ...

    job = make_job(consumer, name=JOB, every=60, handler=handler)
    first, second = dispatcher(consumer), dispatcher(consumer)
    assert first is not None and second is not None
    first.serve([job], "me")
    assert consumer.wait_subscribed(30)
    started = consumer.consumers
    second.serve([job], "me")  # already serving: the same consumers, not a second set
    assert consumer.consumers is started
    second.stop_serving(5)  # another dispatcher stops them
    assert consumer.consumers is None and not consumer.wait_subscribed(0.5)

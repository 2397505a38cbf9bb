"""The RabbitMQ claim backend: one confirmed message per gate queue, queues that expire, errors."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from relay import BackendUnavailable, ConfigurationError, open_backend
from relay.backends.rabbitmq import GateQueues, RabbitMQClaimBackend
from tests.backends.claim_slots import slots
from tests.support.backends import unique
from tests.support.claim_backends import TEST_QUEUE_RETENTION, rabbitmq_claim
from tests.support.services import SERVICES

pytestmark = pytest.mark.rabbitmq


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    with rabbitmq_claim(tmp_path) as url:
        yield url


@pytest.fixture
def backend(url: str) -> Iterator[RabbitMQClaimBackend]:
    opened = open_backend(url)
    assert isinstance(opened, RabbitMQClaimBackend)
    yield opened
    opened.close()


@pytest.fixture
def channel() -> Iterator[Any]:
    connection = pika.BlockingConnection(pika.URLParameters(SERVICES["rabbitmq"].url))
    yield connection.channel()
    if connection.is_open:
        connection.close()


def test_a_run_is_won_once_and_asking_again_loses(backend: RabbitMQClaimBackend, url: str) -> None:
    slot = slots(1)[0]
    other: Any = open_backend(url)
    try:
        assert backend.claim("job", slot) is True
        assert backend.claim("job", slot) is False
        assert other.claim("job", slot) is False
        assert other.claim_many([("job", slot), ("other", slot)]) == [False, True]
    finally:
        other.close()
    assert backend.claim_many([]) == []


def test_the_gate_holds_one_unconsumed_message(backend: RabbitMQClaimBackend, channel: Any) -> None:
    slot = slots(1)[0]
    for _ in range(5):
        backend.claim("job", slot)
    declared = channel.queue_declare(backend.gates.queue("job", slot), passive=True)
    assert declared.method.message_count == 1


def test_gate_queues_are_classic_bounded_and_expiring(
    backend: RabbitMQClaimBackend, channel: Any
) -> None:
    slot = slots(1)[0]
    backend.claim("job", slot)
    name = backend.gates.queue("job", slot)
    arguments = backend.gates.arguments
    assert arguments["x-queue-type"] == "classic"
    assert arguments["x-max-length"] == 1
    assert arguments["x-overflow"] == "reject-publish"
    assert arguments["x-expires"] == backend.remembers_for * 1000
    # The broker has exactly these: declaring the queue without x-expires is refused.
    channel.queue_declare(name, durable=True, arguments=arguments)
    without_expiry = {k: v for k, v in arguments.items() if k != "x-expires"}
    with pytest.raises(ChannelClosedByBroker, match="x-expires"):
        channel.queue_declare(name, durable=True, arguments=without_expiry)


def test_an_unused_gate_queue_deletes_itself(channel: Any) -> None:
    prefix = unique("relay_c")
    backend: Any = open_backend(f"{SERVICES['rabbitmq'].url}?prefix={prefix}&retention=1")
    slot = slots(1)[0]
    try:
        assert backend.claim("job", slot)
    finally:
        backend.close()
    name = backend.gates.queue("job", slot)
    # Not polled: a passive declare counts as a use and would renew the queue's lease.
    time.sleep(5)
    with pytest.raises(ChannelClosedByBroker) as caught:
        channel.queue_declare(name, passive=True)
    assert caught.value.reply_code == 404


def test_long_run_ids_get_hashed_queue_names() -> None:
    gates = GateQueues("relay.claim", 60)
    name = gates.queue("j" * 400, slots(1)[0])
    assert len(name.encode()) <= 255
    assert name == gates.queue("j" * 400, slots(1)[0])
    assert name != gates.queue("j" * 401, slots(1)[0])


def test_instances_disagreeing_on_retention_are_refused(url: str) -> None:
    first: Any = open_backend(url)
    other_retention = f"retention={TEST_QUEUE_RETENTION + 1}"
    second: Any = open_backend(url.replace(f"retention={TEST_QUEUE_RETENTION}", other_retention))
    slot = slots(1)[0]
    try:
        assert first.claim("job", slot)
        with pytest.raises(ConfigurationError, match="same prefix and retention"):
            second.claim("job", slot)
        assert second.claim("another-job", slot)  # its channel is opened again
    finally:
        first.close()
        second.close()


def test_a_closed_connection_is_opened_again(backend: RabbitMQClaimBackend) -> None:
    first, second = slots(2)
    assert backend.claim("job", first)
    backend.close()
    backend.close()
    assert backend.claim_many([("job", first), ("job", second)]) == [False, True]


def test_a_dropped_connection_is_made_again_within_the_call(
    backend: RabbitMQClaimBackend,
) -> None:
    first, second = slots(2)
    assert backend.claim("job", first)
    # Cut the socket under pika, as a broker that dropped an idle connection would.
    connection = backend._connection
    assert connection is not None
    connection._impl._transport._sock.shutdown(socket.SHUT_RDWR)
    assert backend.claim_many([("job", second), ("job", first)]) == [True, False]


def test_refused_credentials_are_unavailable() -> None:
    url = SERVICES["rabbitmq"].url.replace("guest:guest@", "guest:bad@", 1)
    assert "guest:bad@" in url
    with pytest.raises(BackendUnavailable, match=r"refused the credentials.*password") as caught:
        open_backend(url)
    assert "bad" not in str(caught.value)


def test_a_port_nothing_listens_on_is_unavailable() -> None:
    with pytest.raises(BackendUnavailable, match="check that the broker is running"):
        open_backend("amqp://guest:guest@127.0.0.1:1/%2F?connection_attempts=1")


def test_a_missing_vhost_is_unavailable() -> None:
    with pytest.raises(BackendUnavailable, match="vhost exists"):
        open_backend(SERVICES["rabbitmq"].url.rsplit("/", 1)[0] + f"/{unique('nope')}")


def test_unknown_options_are_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"does not know the URL option.*colour"):
        open_backend("amqp://guest:guest@127.0.0.1:1/%2F?colour=red")

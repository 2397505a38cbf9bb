"""Relay as a RabbitMQ user whose configure, write and read permissions cover only its queues.

Each test makes a user and a virtual host of its own on the shared broker with ``rabbitmqctl``
and deletes both afterwards (``tests/support/rabbitmq_users.py``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pika
import pytest
from click.testing import CliRunner
from pika.exceptions import ChannelClosedByBroker

from relay import Run, RunState, open_backend, run_id
from relay.backends._amqp import set_permissions
from relay.backends.rabbitmq_consumer import RabbitMQConsumerBackend
from relay.cli import main
from relay.errors import BackendUnavailable
from tests.backends.test_rabbitmq_consumer import spawn, stop
from tests.support.rabbitmq_users import RabbitUser, rabbitmq_user

pytestmark = pytest.mark.rabbitmq
DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.md"
NOW = datetime.now(UTC).replace(microsecond=0)
SUCCEEDED = RunState.SUCCEEDED


@pytest.fixture(scope="module")
def limited() -> Iterator[RabbitUser]:
    """One vhost and user for the module (rabbitmqctl takes a second or more a call on a loaded
    machine); each test sets the user's permissions and uses job names of its own."""
    with rabbitmq_user() as made:
        yield made


def test_the_documented_permissions_are_the_ones_tested() -> None:
    text = DOCS.read_text()
    assert set_permissions("relay.claim", "relay", "/") in text
    assert set_permissions("relay", "relay", "/") in text


def test_the_claim_backend_runs_with_its_queues_only(limited: RabbitUser) -> None:
    limited.allow("relay.claim")
    claims = open_backend(limited.url())
    try:
        assert claims.claim("claims", NOW) is True  # type: ignore[union-attr]
        assert claims.claim("claims", NOW) is False  # type: ignore[union-attr]
    finally:
        claims.close()
    connection = pika.BlockingConnection(pika.URLParameters(limited.url()))
    try:
        with pytest.raises(ChannelClosedByBroker, match="ACCESS_REFUSED"):
            connection.channel().queue_declare("other.queue")
    finally:
        if connection.is_open:
            connection.close()


@pytest.mark.slow
def test_consumer_mode_runs_with_its_queues_only(limited: RabbitUser, tmp_path: Path) -> None:
    limited.allow("relay")
    url = limited.url(mode="consumer", prefix="relay", retention="120")
    log = tmp_path / "runs.jsonl"
    proc = spawn(url, log, every=0.5)
    try:
        deadline = time.monotonic() + 60
        ended: list[dict[str, object]] = []
        while len(ended) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            lines = log.read_text().splitlines() if log.exists() else []
            ended = [e for e in map(json.loads, lines) if e["event"] == "end"]
    finally:
        stop(proc)
    assert len(ended) >= 2, ended
    # The outcomes stream, written and read as the same user.
    backend = open_backend(url)
    assert isinstance(backend, RabbitMQConsumerBackend)
    try:
        assert backend.record(Run(run_id("limited", NOW), "limited", NOW, 1, 3, "me"), SUCCEEDED)
    finally:
        backend.close()
    shown = CliRunner().invoke(main, ["runs", "--backend", url, "--json"])
    assert shown.exit_code == 0, shown.output
    states = {r["id"]: r["state"] for r in json.loads(shown.output)}
    # The run recorded here, and each scheduled run the consumer ran (recorded as this user too).
    assert states[run_id("limited", NOW)] == "succeeded", states
    assert all(states[str(e["run"])] == "succeeded" for e in ended), (ended, states)


def test_a_missing_permission_is_named(limited: RabbitUser) -> None:
    limited.allow("relay.claim", drop_default_exchange=True)
    claims = open_backend(limited.url())
    try:
        with pytest.raises(BackendUnavailable, match="refused this user") as caught:
            claims.claim("refused", NOW)  # type: ignore[union-attr]
    finally:
        claims.close()
    assert "rabbitmqctl set_permissions -p <vhost> <user> '^relay\\.claim\\..*'" in str(
        caught.value
    )
    assert limited.password not in str(caught.value)

"""RabbitMQ claim backend (``amqp://…``, ``amqps://…``): one winner per run, through a gate queue.

Each run gets a **gate queue**: a classic queue that holds at most one message
(``x-max-length=1``) and refuses the rest (``x-overflow=reject-publish``). Every instance
publishes one message into it with publisher confirms: the broker acks exactly one of them (the
winner) and nacks the others. Nobody consumes the message; the queue deletes itself once it has
been unused for ``retention`` seconds (``x-expires``), which is how long the claim is remembered.

Quorum queues would not do: they accept one message beyond ``x-max-length``.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import pika
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import (
    AMQPChannelError,
    AMQPConnectionError,
    AMQPError,
    ChannelClosedByBroker,
    NackError,
    ProbableAccessDeniedError,
    ProbableAuthenticationError,
)

from relay.backends._amqp import (
    PRECONDITION_FAILED,
    TLS_OPTIONS,
    answered_within,
    close_quietly,
    confirm_channel,
    pika_parameters,
    refused,
    timeout_of,
    unreachable,
)
from relay.backends._ms import positive_ms
from relay.backends._url import BackendURL
from relay.deadlines import DEFAULT_TIMEOUT
from relay.durations import seconds
from relay.errors import BackendUnavailable, ConfigurationError
from relay.runs import check_slots, run_id

__all__ = ["DEFAULT_RETENTION", "GateQueues", "RabbitMQClaimBackend", "pika_parameters"]

DEFAULT_RETENTION = 600.0
"""Seconds an unused gate queue (and so a claim) lives unless told: queues cost broker memory."""
_OUR_OPTIONS = ("prefix", "retention", "timeout")
_PREFIX = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
_DRIVER_OPTIONS = (
    "heartbeat",
    "socket_timeout",
    "connection_attempts",
    "retry_delay",
    "blocked_connection_timeout",
)
_MAX_QUEUE_NAME = 255


@dataclass(frozen=True)
class GateQueues:
    """The gate queues of runs: a run is won by the one publish its queue accepts.

    Usable by any module holding a pika channel in confirm mode.
    """

    prefix: str = "relay.claim"
    retention: float = DEFAULT_RETENTION

    def __post_init__(self) -> None:
        # Operators grant a Relay user its queues by a regular expression on this prefix
        # (docs/security.md): a prefix with other characters would widen or break that rule.
        if not _PREFIX.fullmatch(self.prefix):
            raise ConfigurationError(
                f"RabbitMQ queue prefix {self.prefix!r} is not usable: use at most 100 letters, "
                "digits and '_', '-', '.', ':', such as ?prefix=relay or ?prefix=myapp.relay"
            )

    def queue(self, job: str, slot: datetime) -> str:
        """The gate queue's name: ``<prefix>.<run id>``, hashed if that is too long for AMQP."""
        name = f"{self.prefix}.{run_id(job, slot)}"
        if len(name.encode()) <= _MAX_QUEUE_NAME:
            return name
        return f"{self.prefix}.{hashlib.sha256(name.encode()).hexdigest()}"

    @property
    def arguments(self) -> dict[str, Any]:
        """The queue arguments every instance declares (they must agree, or the broker refuses)."""
        return {
            "x-queue-type": "classic",
            "x-max-length": 1,
            "x-overflow": "reject-publish",
            "x-expires": positive_ms(self.retention),
        }

    def declare(self, channel: BlockingChannel, job: str, slot: datetime) -> str:
        """Declare the run's gate queue (durable: a claim outlives a broker restart)."""
        name = self.queue(job, slot)
        channel.queue_declare(name, durable=True, arguments=self.arguments)
        return name

    def try_pass(self, channel: BlockingChannel, job: str, slot: datetime) -> bool:
        """Publish into the run's gate queue: ``True`` if the broker accepted (acked) our message.

        ``channel`` must be in confirm mode (``confirm_delivery()``).
        """
        name = self.declare(channel, job, slot)
        try:
            channel.basic_publish(
                exchange="",
                routing_key=name,
                body=run_id(job, slot).encode(),
                properties=pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent),
                mandatory=True,
            )
        except NackError:
            return False
        return True


class RabbitMQClaimBackend:
    """One winner per run on RabbitMQ: a confirmed publish into a queue that holds one message."""

    capability: Literal["claim"] = "claim"

    def __init__(
        self,
        parameters: pika.connection.Parameters,
        *,
        prefix: str = "relay.claim",
        retention: float = DEFAULT_RETENTION,
        location: str = "RabbitMQ",
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.gates = GateQueues(prefix, retention)
        self.location = location
        self.timeout = seconds(timeout, "timeout")
        """Seconds each operation may wait for the broker (connects: the ``parameters``' own)."""
        self._parameters = parameters
        # pika's BlockingConnection is not thread-safe: every use holds this lock.
        self._lock = threading.Lock()
        self._connection: pika.BlockingConnection | None = None
        self._channel: BlockingChannel | None = None
        with self._lock, self._translated():
            self._ready_channel()

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RabbitMQClaimBackend:
        """Connect to the broker an ``amqp://user:password@host:port/vhost`` URL names.

        Options: ``prefix`` of the gate queues (default ``relay.claim``), ``retention`` in
        seconds (default 600), ``timeout`` in seconds for each connect and operation, publisher
        confirms included (default 2), and pika's ``heartbeat``, ``socket_timeout``,
        ``connection_attempts``, ``retry_delay``, ``blocked_connection_timeout``.
        """
        parsed = BackendURL(url)
        parsed.check_options(
            [*_OUR_OPTIONS, *_DRIVER_OPTIONS, *TLS_OPTIONS], "the RabbitMQ claim backend"
        )
        timeout = timeout_of(parsed)
        return cls(
            pika_parameters(parsed, _OUR_OPTIONS, timeout),
            prefix=parsed.option("prefix", "relay.claim"),
            retention=parsed.float_option("retention", DEFAULT_RETENTION),
            location=parsed.redacted(),
            timeout=timeout,
            **kwargs,
        )

    @property
    def name(self) -> str:
        return f"RabbitMQ (gate queues, retention={self.gates.retention:g}s)"

    @property
    def remembers_for(self) -> float | None:
        return self.gates.retention

    def claim(self, job: str, slot: datetime) -> bool:
        return self.claim_many([(job, slot)])[0]

    def claim_many(self, runs: Sequence[tuple[str, datetime]]) -> list[bool]:
        check_slots(runs)  # a naive slot refuses the whole batch, before anything is written
        won: list[bool] = []
        with self._lock, self._translated():
            retried = False
            while len(won) < len(runs):
                job, slot = runs[len(won)]
                try:
                    channel = self._ready_channel()
                    with answered_within(channel.connection, self.timeout):
                        won.append(self.gates.try_pass(channel, job, slot))
                except AMQPConnectionError:
                    # An idle connection may have been dropped (missed heartbeats): reconnect
                    # once. If our publish had reached the queue, the retry is nacked and the
                    # run is lost, never won twice.
                    if retried:
                        raise
                    retried = True
                    self._drop()
        return won

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _ready_channel(self) -> BlockingChannel:
        self._connection, self._channel = confirm_channel(
            self._connection, self._channel, self._parameters, self.timeout
        )
        return self._channel

    def _drop(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        close_quietly(connection)

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except ProbableAuthenticationError as exc:
            raise BackendUnavailable(
                f"RabbitMQ at {self.location} refused the credentials: "
                "check the user name and password in the URL"
            ) from exc
        except ProbableAccessDeniedError as exc:
            raise BackendUnavailable(
                f"RabbitMQ at {self.location} refused access to the virtual host ({exc}): "
                "check that the URL's vhost exists and that the user may use it"
            ) from exc
        except ChannelClosedByBroker as exc:
            if exc.reply_code == PRECONDITION_FAILED:
                raise ConfigurationError(
                    f"RabbitMQ refused a gate queue ({exc.reply_text}): every instance must use "
                    "the same prefix and retention, and no other queue may use the prefix"
                ) from exc
            raise refused(self.location, exc, self.gates.prefix) from exc
        except (AMQPConnectionError, AMQPChannelError, AMQPError) as exc:
            self._drop()
            raise unreachable(self.location, exc) from exc

"""What the RabbitMQ backends share: the URL, a channel in confirm mode, and driver errors."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress

import pika
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import AMQPError

from relay.backends._url import BackendURL
from relay.errors import BackendUnavailable, ConfigurationError

PRECONDITION_FAILED = 406
"""The broker's reply code for a queue declared again with other arguments."""
NOT_FOUND = 404
"""The broker's reply code for a queue that does not exist."""


def pika_parameters(parsed: BackendURL, ours: Sequence[str]) -> pika.URLParameters:
    """pika's connection parameters from a URL, without Relay's own options ``ours``."""
    try:
        return pika.URLParameters(parsed.without_options(ours))
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(f"AMQP URL {parsed.redacted()!r} is malformed: {exc}") from None


def confirm_channel(
    connection: pika.BlockingConnection | None,
    channel: BlockingChannel | None,
    parameters: pika.connection.Parameters,
) -> tuple[pika.BlockingConnection, BlockingChannel]:
    """``connection`` and ``channel`` if still open, else new ones; the channel confirms publishes.

    A new connection always comes with a new channel.
    """
    if connection is None or not connection.is_open:
        connection, channel = pika.BlockingConnection(parameters), None
    if channel is None or not channel.is_open:
        channel = connection.channel()
        channel.confirm_delivery()
    return connection, channel


def close_quietly(connection: pika.BlockingConnection | None) -> None:
    """Close ``connection`` if it is open; a broker that already dropped it is no error."""
    if connection is not None and connection.is_open:
        with suppress(AMQPError):
            connection.close()


def unreachable(location: str, exc: Exception) -> BackendUnavailable:
    """The error for a broker that cannot be reached or dropped the connection."""
    return BackendUnavailable(
        f"cannot reach RabbitMQ at {location} ({exc!r}): check that the broker is "
        "running and that the URL's host, port and credentials are right"
    )


def refused(location: str, exc: Exception) -> BackendUnavailable:
    """The error for a channel the broker closed for a reason Relay does not handle."""
    return BackendUnavailable(f"RabbitMQ at {location} refused: {exc}")

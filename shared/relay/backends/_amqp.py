"""What the RabbitMQ backends share: the URL, a channel in confirm mode, deadlines, driver errors.

``timeout`` (seconds, default 2, :mod:`relay.deadlines`) bounds each connect and each operation:
pika's ``socket_timeout`` (the TCP connect), ``stack_timeout`` (the whole bring-up: TCP, TLS,
AMQP handshake) and ``blocked_connection_timeout`` (a broker that blocks publishers) are set to
it, and each operation on an open connection runs :func:`answered_within` it, publisher
confirms included. pika's blocking calls wait for the broker's answer for ever otherwise: a
partition that drops packets would hang them until the AMQP heartbeat (a minute) noticed.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from functools import partial

import pika
from pika.adapters.blocking_connection import BlockingChannel
from pika.adapters.utils.connection_workflow import AMQPConnectorException
from pika.exceptions import AMQPConnectionError, AMQPError

from relay.backends._tls import verified_context
from relay.backends._url import BackendURL
from relay.deadlines import DEFAULT_TIMEOUT
from relay.errors import BackendUnavailable, ConfigurationError

PRECONDITION_FAILED = 406
"""The broker's reply code for a queue declared again with other arguments."""
NOT_FOUND = 404
"""The broker's reply code for a queue that does not exist."""
TLS_OPTIONS = ("cacertfile", "certfile", "keyfile")
"""URL options of an ``amqps://`` URL, named as RabbitMQ's URI query parameters: the CA that
signed the broker's certificate, and a client certificate and its key. The broker's certificate
and host name are always verified; no URL option turns that off."""
ACCESS_REFUSED = 403
"""The broker's reply code for a resource the user's permissions do not cover."""


def permissions(prefix: str) -> tuple[str, str, str]:
    """The configure, write and read patterns of a user limited to the queues of ``prefix``.

    Every queue Relay declares is named ``<prefix>.…`` (gate queues; in consumer mode also run,
    dead-letter and outcome queues). Writes also go to the default exchange, ``amq.default``,
    which Relay publishes through and run queues dead-letter to.
    """
    queues = f"^{re.escape(prefix)}\\..*"
    return queues, f"^({re.escape(prefix)}\\..*|amq\\.default)$", queues


def set_permissions(prefix: str, user: str = "relay", vhost: str = "/") -> str:
    """The ``rabbitmqctl`` command that gives ``user`` those permissions on ``vhost``."""
    configure, write, read = permissions(prefix)
    return f"rabbitmqctl set_permissions -p {vhost} {user} '{configure}' '{write}' '{read}'"


def pika_parameters(
    parsed: BackendURL, ours: Sequence[str], timeout: float = DEFAULT_TIMEOUT
) -> pika.URLParameters:
    """pika's connection parameters from a URL, without Relay's own options ``ours`` (nor
    ``timeout``); TLS from :data:`TLS_OPTIONS` on an ``amqps://`` URL. Each connect ends within
    ``timeout`` seconds (the URL's ``socket_timeout`` or ``blocked_connection_timeout``, if
    given, win over it for their part)."""
    try:
        parameters = pika.URLParameters(parsed.without_options([*ours, "timeout", *TLS_OPTIONS]))
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(f"AMQP URL {parsed.redacted()!r} is malformed: {exc}") from None
    if any(name in parsed.options for name in TLS_OPTIONS):
        parameters.ssl_options = pika.SSLOptions(_tls_context(parsed))
    parameters.stack_timeout = timeout
    if "socket_timeout" not in parsed.options:
        parameters.socket_timeout = timeout
    if "blocked_connection_timeout" not in parsed.options:
        parameters.blocked_connection_timeout = timeout
    return parameters


def timeout_of(parsed: BackendURL) -> float:
    """The URL's ``timeout``: seconds, positive and finite (default 2), checked here, once."""
    return parsed.float_option("timeout", DEFAULT_TIMEOUT)


@contextmanager
def answered_within(connection: pika.BlockingConnection, timeout: float) -> Iterator[None]:
    """Every wait on ``connection`` in the block ends within ``timeout`` seconds in all: past
    that the connection is dropped, and the waiting call raises ``AMQPConnectionError``.

    pika's own ``blocked_connection_timeout`` ends a connection the same way: a timer on the
    connection's I/O loop, which runs (in this thread) while a blocking call waits.
    """
    impl = connection._impl
    error = AMQPConnectionError(f"RabbitMQ did not answer within timeout={timeout:g}s")
    timer = impl._adapter_call_later(timeout, partial(_drop_stream, impl, error))
    try:
        yield
    finally:
        impl._adapter_remove_timeout(timer)


def _drop_stream(impl: pika.connection.Connection, error: Exception) -> None:
    if not impl.is_closed:
        impl._terminate_stream(error)


def _tls_context(parsed: BackendURL) -> ssl.SSLContext:
    """A verifying TLS context from the URL's ``cacertfile``, ``certfile`` and ``keyfile``."""
    if parsed.scheme != "amqps":
        raise ConfigurationError(
            f"AMQP URL {parsed.redacted()!r} gives TLS files to a plain-text amqp:// URL: use "
            "amqps://host:5671/vhost (TLS), or drop cacertfile, certfile and keyfile"
        )
    context = verified_context(parsed, TLS_OPTIONS, "AMQP")
    assert context is not None  # called only when the URL gives one of the files
    return context


def confirm_channel(
    connection: pika.BlockingConnection | None,
    channel: BlockingChannel | None,
    parameters: pika.connection.Parameters,
    timeout: float = DEFAULT_TIMEOUT,
) -> tuple[pika.BlockingConnection, BlockingChannel]:
    """``connection`` and ``channel`` if still open, else new ones; the channel confirms publishes.

    A new connection always comes with a new channel; opening the channel ends within
    ``timeout`` seconds (:func:`answered_within`), the connect within the parameters' own.
    """
    if connection is None or not connection.is_open:
        connection, channel = connect(parameters), None
    if channel is None or not channel.is_open:
        with answered_within(connection, timeout):
            channel = connection.channel()
            channel.confirm_delivery()
    return connection, channel


def connect(parameters: pika.connection.Parameters) -> pika.BlockingConnection:
    """A connection; a failed TLS handshake (pika lets ``ssl`` errors through) becomes an
    ``AMQPConnectionError`` naming the fix, so that callers translate it as any other, and so
    does a bring-up past ``stack_timeout`` (pika raises its connector's own error for that)."""
    try:
        return pika.BlockingConnection(parameters)
    except AMQPConnectorException as exc:
        raise AMQPConnectionError(f"could not connect: {exc!r}") from exc
    except ssl.SSLCertVerificationError as exc:
        raise AMQPConnectionError(
            f"TLS refused, certificate verify failed ({exc.verify_message or exc}): the broker's "
            "certificate did not verify: give the CA that signed it in the URL "
            "(?cacertfile=/path/ca.pem), and reach the broker by a host name its certificate names"
        ) from exc
    except ssl.SSLError as exc:
        raise AMQPConnectionError(
            f"TLS failed: {exc}; check that the port speaks TLS (5671 by default for amqps://) "
            "and the URL's cacertfile, certfile and keyfile"
        ) from exc


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


def refused(location: str, exc: Exception, prefix: str | None = None) -> BackendUnavailable:
    """The error for a channel the broker closed for a reason Relay does not handle; a refusal
    for lack of permission names the permissions Relay's user needs (queues of ``prefix``)."""
    if prefix is not None and getattr(exc, "reply_code", None) == ACCESS_REFUSED:
        return BackendUnavailable(
            f"RabbitMQ at {location} refused this user ({exc}): give it the permissions "
            f"Relay's queues need, {set_permissions(prefix, '<user>', '<vhost>')} "
            "(see docs/security.md)"
        )
    return BackendUnavailable(f"RabbitMQ at {location} refused: {exc}")

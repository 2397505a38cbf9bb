"""Redis Sentinel: a client of the primary that a set of sentinels names, following failovers.

``redis+sentinel://[[user]:password@]host:port[,host:port…]/SERVICE[/DB][?options]`` (also
``valkey+sentinel://``, and ``rediss+sentinel://`` for TLS to the data nodes). The hosts are the
sentinels (port 26379 where none is given); the user and password are the data nodes'. The
sentinels' own, if they have them, are the options ``sentinel_password`` (and
``sentinel_username``).

redis-py's ``Sentinel.master_for`` asks the sentinels for the primary at each new connection and
drops its connections when the answer changes; a demoted primary's ``READONLY`` reply drops the
connection too, so the next call asks again. Scripts a new primary lacks (a replica does not
receive ``SCRIPT LOAD``) are loaded again by the backends on ``NOSCRIPT``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

import redis
from redis.backoff import NoBackoff
from redis.connection import SSLConnection, parse_url
from redis.retry import Retry
from redis.sentinel import Sentinel

from relay.backends._redis import hostname_checked
from relay.backends._url import BackendURL
from relay.errors import ConfigurationError

__all__ = [
    "DEFAULT_PORT",
    "OPTIONS",
    "close_sentinels",
    "is_sentinel",
    "sentinel_client",
    "service_of",
]

DEFAULT_PORT = 26379
"""The port of a sentinel the URL names without one."""
OPTIONS = ("sentinel_password", "sentinel_username")
"""URL options for the sentinels themselves (the data nodes' are the URL's user and password)."""
_EXAMPLE = "redis+sentinel://host1:26379,host2:26379/mymaster/0"


def is_sentinel(parsed: BackendURL) -> bool:
    """Whether the URL names sentinels (``redis+sentinel://``, ``rediss+sentinel://``…)."""
    return parsed.scheme.endswith("+sentinel")


def service_of(parsed: BackendURL) -> tuple[str, str]:
    """The service the sentinels monitor and the database number (``""`` if none), checked."""
    if not parsed.hosts:
        raise ConfigurationError(
            f"Sentinel URL {parsed.redacted()!r} names no sentinel: list them as host:port, "
            f"such as {_EXAMPLE}"
        )
    service, _, database = parsed.parts.path.strip("/").partition("/")
    if not service:
        raise ConfigurationError(
            f"Sentinel URL {parsed.redacted()!r} names no service: add the name the sentinels "
            f"monitor (their 'sentinel monitor NAME …') as the path, such as {_EXAMPLE}"
        )
    if database and not database.isdigit():
        raise ConfigurationError(
            f"Sentinel URL {parsed.redacted()!r} names database {database!r}: after the service "
            f"comes a database number, such as {_EXAMPLE}"
        )
    return unquote(service), database


def sentinel_client(parsed: BackendURL, ours: Sequence[str], **options: Any) -> redis.Redis:
    """A client of the current primary of the URL's service; ``options`` go to its connections.

    ``ours`` are the URL options the backend reads itself; the rest are redis-py's, parsed as
    redis-py parses them in a ``redis://`` URL. No connection is made until the first command.
    """
    service, database = service_of(parsed)
    kwargs = _data_node_kwargs(parsed, [*ours, *OPTIONS], database)
    for name, value in options.items():
        kwargs.setdefault(name, value)
    # A sentinel that does not answer is not retried: the next one in the list is asked.
    own: dict[str, Any] = {k: v for k, v in kwargs.items() if k.startswith("socket_")}
    own["retry"] = Retry(NoBackoff(), retries=0)
    if "sentinel_password" in parsed.options:
        own["password"] = parsed.options["sentinel_password"]
    if "sentinel_username" in parsed.options:
        own["username"] = parsed.options["sentinel_username"]
    sentinels = [(host, port or DEFAULT_PORT) for host, port in parsed.hosts]
    manager = Sentinel(sentinels, sentinel_kwargs=own)  # type: ignore[no-untyped-call, unused-ignore]
    client: redis.Redis = manager.master_for(service, **kwargs)  # type: ignore[no-untyped-call, unused-ignore]
    return client


def _data_node_kwargs(parsed: BackendURL, ours: Sequence[str], database: str) -> dict[str, Any]:
    """The data nodes' connection options: the URL's credentials, database and driver options."""
    tls = parsed.scheme.startswith(("rediss", "valkeys"))
    credentials = parsed.parts.netloc.rpartition("@")[0]
    query = parsed.without_options(ours).partition("?")[2]
    url = f"{'rediss' if tls else 'redis'}://{credentials}{'@' if credentials else ''}sentinel"
    url += f"/{database}" + (f"?{query}" if query else "")
    try:
        kwargs: dict[str, Any] = parse_url(hostname_checked(url))  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise ConfigurationError(
            f"Sentinel URL {parsed.redacted()!r} is malformed: {exc}; expected {_EXAMPLE}"
        ) from None
    kwargs.pop("host", None)
    if kwargs.pop("connection_class", None) is SSLConnection:
        kwargs["ssl"] = True  # the Sentinel pool picks its own TLS connection class
    return kwargs


def close_sentinels(client: Any) -> None:
    """Close the connections to the sentinels behind a client :func:`sentinel_client` made."""
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    if isinstance(manager, Sentinel):
        # Not manager.close(), new in redis-py 8.1; and the pool too: before 5.1, a client's
        # close() leaves the pool it made connected.
        for sentinel in manager.sentinels:
            sentinel.close()
            sentinel.connection_pool.disconnect()

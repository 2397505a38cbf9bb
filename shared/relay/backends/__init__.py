"""Backends: one module per store, opened from a URL.

==========================================  =======  =====================================
URL                                          kind     module
==========================================  =======  =====================================
``sqlite:///relay.db``                       lease    :mod:`relay.backends.sqlite`
``sqlite:///claims.db?strategy=claim``       claim    :mod:`relay.backends.sqlite_claim`
``postgresql://…`` / ``postgres://…``        lease    :mod:`relay.backends.postgres`
``redis://…`` (``rediss``, ``valkey``)       lease    :mod:`relay.backends.redis_lease`
``redis://…?strategy=stream-id|idmp|script`` claim    :mod:`relay.backends.redis_claim`
``amqp://…`` (``amqps``)                     claim    :mod:`relay.backends.rabbitmq`
``amqp://…?mode=consumer``                   claim    :mod:`relay.backends.rabbitmq_consumer`
``nats://…`` (strategy ``kv``, the default)  lease    :mod:`relay.backends.nats_kv`
``nats://…?strategy=dedup``                  claim    :mod:`relay.backends.nats_dedup`
==========================================  =======  =====================================

Drivers are imported only when a backend of theirs is opened; a missing one raises
:class:`~relay.errors.MissingDependency` naming the extra to install.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, TypeAlias

from relay.backends._url import BackendURL
from relay.contract import ClaimBackend, LeaseBackend
from relay.errors import ConfigurationError, MissingDependency, UnknownBackend
from relay.jobs import LEASE_BACKENDS  # re-exported: the integrations name it from here

__all__ = ["LEASE_BACKENDS", "Backend", "open_backend"]

Backend: TypeAlias = "ClaimBackend | LeaseBackend"

# (scheme, strategy) -> (module, class, extra, driver package). Strategy "" is the scheme's default.
_REGISTRY: dict[tuple[str, str], tuple[str, str, str, str]] = {
    ("sqlite", ""): ("sqlite", "SQLiteLeaseBackend", "sqlite", "sqlite3"),
    ("sqlite", "claim"): ("sqlite_claim", "SQLiteClaimBackend", "sqlite", "sqlite3"),
    ("postgresql", ""): ("postgres", "PostgresLeaseBackend", "postgres", "psycopg"),
    ("redis", "lease"): ("redis_lease", "RedisLeaseBackend", "redis", "redis"),
    ("redis", "stream-id"): ("redis_claim", "RedisClaimBackend", "redis", "redis"),
    ("redis", "idmp"): ("redis_claim", "RedisClaimBackend", "redis", "redis"),
    ("redis", "script"): ("redis_claim", "RedisClaimBackend", "redis", "redis"),
    ("amqp", ""): ("rabbitmq", "RabbitMQClaimBackend", "rabbitmq", "pika"),
    ("amqp", "consumer"): ("rabbitmq_consumer", "RabbitMQConsumerBackend", "rabbitmq", "pika"),
    ("nats", "kv"): ("nats_kv", "NatsLeaseBackend", "nats", "nats"),
    ("nats", "dedup"): ("nats_dedup", "NatsClaimBackend", "nats", "nats"),
}
_ALIASES = {
    "postgres": "postgresql",
    "rediss": "redis",
    "valkey": "redis",
    "valkeys": "redis",
    "amqps": "amqp",
    "tls": "nats",
}
_DEFAULT_STRATEGY = {"redis": "lease", "nats": "kv"}


def open_backend(url: str, **options: Any) -> Backend:
    """Open the backend a URL names; ``options`` go to its ``from_url`` (e.g. an injected clock)."""
    parsed = BackendURL(url)
    scheme = _ALIASES.get(parsed.scheme, parsed.scheme)
    strategy = parsed.options.get("strategy", _DEFAULT_STRATEGY.get(scheme, ""))
    if scheme == "amqp" and "mode" in parsed.options:  # amqp://…?mode=consumer
        strategy = parsed.options["mode"]
    entry = _REGISTRY.get((scheme, strategy))
    if entry is None:
        raise UnknownBackend(_unknown_message(parsed.scheme, scheme, strategy))
    module_name, class_name, extra, driver = entry
    try:
        importlib.import_module(driver)
    except ImportError:
        raise MissingDependency(driver, extra) from None
    module = importlib.import_module(f"relay.backends.{module_name}")
    cls = getattr(module, class_name)
    _check_options(cls, options)
    backend: Backend = cls.from_url(url, **options)
    return backend


def _check_options(cls: type, options: dict[str, Any]) -> None:
    """Refuse keyword options the backend's constructor does not take, naming those it does."""
    if not options:
        return
    parameters = inspect.signature(cls).parameters
    accepted = {n for n, p in parameters.items() if p.kind is p.KEYWORD_ONLY}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ConfigurationError(
            f"{cls.__name__} takes no option(s) {', '.join(unknown)}; "
            f"it takes: {', '.join(sorted(accepted)) or 'none'}"
        )


def _unknown_message(raw_scheme: str, scheme: str, strategy: str) -> str:
    schemes = sorted({s for s, _ in _REGISTRY} | set(_ALIASES))
    if any(s == scheme for s, _ in _REGISTRY):
        strategies = sorted(st for s, st in _REGISTRY if s == scheme and st)
        return (
            f"unknown strategy {strategy!r} for {raw_scheme}:// URLs; "
            f"known strategies: {', '.join(strategies)}"
        )
    return f"unknown backend URL scheme {raw_scheme + '://'!r}; known schemes: " + ", ".join(
        f"{s}://" for s in schemes
    )

"""Backends: one module per store, opened from a URL.

==========================================  =======  =====================================
URL                                          kind     module
==========================================  =======  =====================================
``sqlite:///relay.db``                       lease    :mod:`relay.backends.sqlite`
``sqlite:///claims.db?strategy=claim``       claim    :mod:`relay.backends.sqlite_claim`
``postgresql://…`` / ``postgres://…``        lease    :mod:`relay.backends.postgres`
``redis://…`` (``rediss``, ``valkey``)       lease    :mod:`relay.backends.redis_lease`
``redis://…?strategy=stream-id|idmp|script`` claim    :mod:`relay.backends.redis_claim`
``redis+sentinel://h1,h2/SERVICE``           lease    :mod:`relay.backends.redis_lease`
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
from typing import Any, Literal, TypeAlias, cast

from relay.backends._url import BackendURL
from relay.contract import ClaimBackend, LeaseBackend
from relay.errors import (
    BackendUnavailable,
    ConfigurationError,
    MissingDependency,
    UnknownBackend,
)
from relay.jobs import LEASE_BACKENDS  # re-exported: the integrations name it from here

__all__ = [
    "LEASE_BACKENDS",
    "Backend",
    "capability_of",
    "one_host_warning",
    "open_backend",
    "open_or_defer",
]

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
    ("redis+sentinel", "lease"): ("redis_lease", "RedisLeaseBackend", "redis", "redis"),
    ("redis+sentinel", "stream-id"): ("redis_claim", "RedisClaimBackend", "redis", "redis"),
    ("redis+sentinel", "idmp"): ("redis_claim", "RedisClaimBackend", "redis", "redis"),
    ("redis+sentinel", "script"): ("redis_claim", "RedisClaimBackend", "redis", "redis"),
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
    "rediss+sentinel": "redis+sentinel",
    "valkey+sentinel": "redis+sentinel",
    "valkeys+sentinel": "redis+sentinel",
}
_DEFAULT_STRATEGY = {"redis": "lease", "redis+sentinel": "lease", "nats": "kv"}
_LEASE_MODULES = {"sqlite", "postgres", "redis_lease", "nats_kv"}
# Backends whose driver takes several hosts in one URL (host1:port1,host2:port2) and uses them
_MULTI_HOST_MODULES = {"postgres", "nats_kv", "nats_dedup"}
# Schemes whose hosts are not data nodes: Redis Sentinel's URL lists the sentinels
_MULTI_HOST_SCHEMES = {"redis+sentinel"}


def open_backend(
    url: str, *, read_only: bool = False, deferred: bool = False, **options: Any
) -> Backend:
    """Open the backend a URL names; ``options`` go to its ``from_url`` (e.g. an injected clock).

    ``deferred=True`` connects to nothing yet: the backend is opened by the first call that needs
    the store, and a call made while the store cannot be reached raises
    :class:`~relay.errors.BackendUnavailable` (the next call tries again). So a host starts, and
    an application imports, while its store is down. The URL's form is checked now, its options
    when the store is first opened.
    RabbitMQ consumer mode (``mode=consumer``) opens at once: its broker hands the runs out.

    ``read_only=True`` opens a lease store for reading only, as every command that only reads
    does: nothing is created or migrated, and a store that does not exist (no file, schema, key
    prefix or bucket) raises :class:`~relay.errors.StoreNotFound` naming what was not found. Claim
    stores keep nothing to read: they are refused with a ``ConfigurationError``.
    """
    factory = _factory(url)
    _check_options(factory, options)
    if read_only:
        if factory.capability != "lease" and not getattr(factory, "readable_runs", False):
            raise ConfigurationError(
                f"{BackendURL(url).redacted().split('?')[0]!r} is a claim backend: it records "
                "only who won each run, "
                "no runs or instances to read; read-only commands need a lease backend "
                "(sqlite, postgresql, redis, nats)"
            )
        options["read_only"] = True
    if deferred and getattr(factory, "deferrable", True):
        from relay.backends._deferred import deferred as deferred_backend

        stand_in: Backend = cast("Backend", deferred_backend(factory, url, options))
        return stand_in
    backend: Backend = factory.from_url(url, **options)
    return backend


def open_or_defer(url: str) -> Backend:
    """:func:`open_backend` now, or deferred (``deferred=True``) if the store cannot be reached
    now: what a host opens at start, so it starts with its store down (and waits for it) but
    still refuses a bad option or a schema to migrate at once when the store is up."""
    try:
        return open_backend(url)
    except BackendUnavailable:
        return open_backend(url, deferred=True)


def capability_of(url: str) -> Literal["claim", "lease"]:
    """``"claim"`` or ``"lease"``: the kind of backend a URL names, without opening it or
    importing its driver.

    Raises :class:`~relay.errors.UnknownBackend` (or ``ConfigurationError``) like
    :func:`open_backend` for a URL it cannot use.
    """
    return "lease" if _entry(url)[0] in _LEASE_MODULES else "claim"


def _factory(url: str) -> Any:
    """The backend class a URL names (its driver imported, or ``MissingDependency``)."""
    module_name, class_name, extra, driver = _entry(url)
    try:
        importlib.import_module(driver)
    except ImportError:
        raise MissingDependency(driver, extra) from None
    return getattr(importlib.import_module(f"relay.backends.{module_name}"), class_name)


def _entry(url: str) -> tuple[str, str, str, str]:
    """The registry entry of the backend a URL names."""
    parsed = BackendURL(url)
    scheme = _ALIASES.get(parsed.scheme, parsed.scheme)
    strategy = parsed.options.get("strategy", _DEFAULT_STRATEGY.get(scheme, ""))
    if scheme == "amqp" and "mode" in parsed.options:  # amqp://…?mode=consumer
        strategy = parsed.options["mode"]
    entry = _REGISTRY.get((scheme, strategy))
    if entry is None:
        raise UnknownBackend(_unknown_message(parsed.scheme, scheme, strategy))
    several = entry[0] in _MULTI_HOST_MODULES or scheme in _MULTI_HOST_SCHEMES
    if parsed.multi_host and not several:
        raise ConfigurationError(
            f"backend URL {parsed.redacted()!r} names {len(parsed.hosts)} hosts, but "
            f"{parsed.scheme}:// takes one. Name one host, or use a backend that fails over "
            "between several: postgresql://a:5432,b:5432/db?target_session_attrs=read-write, "
            "nats://a:4222,b:4222, or Redis Sentinel (redis+sentinel://a:26379,b:26379/SERVICE)"
        )
    return entry


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


def one_host_warning(backend: Backend) -> str | None:
    """A warning for a store that only processes on one host can share (SQLite), else ``None``.

    Task-queue integrations run on many hosts: each host would decide on a file of its own and
    publish every run again, so they log this once when they start on such a store.
    """
    from relay.backends._deferred import backend_class
    from relay.backends.sqlite import SQLiteLeaseBackend
    from relay.backends.sqlite_claim import SQLiteClaimBackend

    if not issubclass(backend_class(backend), SQLiteLeaseBackend | SQLiteClaimBackend):
        return None
    return (
        f"{backend.name} serves one host only: processes on other hosts would each decide on "
        "a file of their own and run every run again. Across hosts, use PostgreSQL, Redis or "
        "NATS (the backend setting)"
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

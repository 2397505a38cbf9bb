"""A backend opened at its first use, so a host can start while its store is down.

``open_backend(url, deferred=True)`` returns one: creating it connects to nothing, creates no
file, schema, key or bucket. The first call that needs the store opens it (as ``open_backend``
would) and every call after goes to the opened backend. While the store cannot be reached, each
call raises :class:`~relay.errors.BackendUnavailable` and the next one tries to open it again: the
hosts' loops already back off and report on that error.

The stand-in has the opened backend's class attributes and methods (so the engine's checks,
``capability`` and the optional protocols, answer without opening it) and its :attr:`name` and
``deadline`` come from the URL until it is open (the name as the opened backend gives it, where
the backend class says so with ``name_for(url)``).
"""

from __future__ import annotations

import inspect
import threading
from typing import Any

from relay.backends._url import BackendURL
from relay.errors import BackendUnavailable

__all__ = ["DeferredBackend", "backend_class", "deferred"]

_OWN = frozenset({"name", "close", "deadline", "open", "is_open", "backend_class"})
_PROBED = frozenset({"job_options", "now", "heartbeat_many", "readable_runs"})
"""Optional members the engine and the hosts probe for; when a backend has one, its class does."""
_STATE = frozenset({"_url", "_options", "_where", "_deadline", "_opening", "_opened", "_closed"})
_classes: dict[type, type[DeferredBackend]] = {}
_classes_lock = threading.Lock()


class DeferredBackend:
    """Stands for the backend ``factory.from_url(url, **options)`` until it is first used."""

    backend_class: Any
    """The class of the backend this one opens (``PostgresLeaseBackend``…)."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        self._url, self._options = url, options
        self._where = _name_for(self.backend_class, url)
        self._deadline = _deadline(self.backend_class, url)
        self._opening = threading.Lock()
        self._opened: Any = None
        self._closed = False

    @property
    def name(self) -> str:
        """The opened backend's name; before that, its kind and URL (password hidden)."""
        opened = self._opened
        return opened.name if opened is not None else self._where

    @property
    def deadline(self) -> Any:
        """The opened backend's ``deadline`` (how long one call may wait), read from the URL."""
        return self._deadline

    @property
    def is_open(self) -> bool:
        """Whether the store answered once and the backend is open."""
        return self._opened is not None

    def open(self) -> Any:
        """The opened backend, opening it now if needed: ``BackendUnavailable`` while the
        store cannot be reached; any other error of ``open_backend`` (a bad option, a schema to
        migrate) as it would raise it."""
        opened = self._opened
        if opened is not None:
            return opened
        with self._opening:
            if self._opened is None:
                if self._closed:
                    raise BackendUnavailable(f"{self._where} was closed before it was opened")
                self._opened = self.backend_class.from_url(self._url, **self._options)
            return self._opened

    def close(self) -> None:
        """Close the opened backend; one never opened has nothing to close."""
        with self._opening:
            self._closed = True
            opened = self._opened
        if opened is not None:
            opened.close()

    def __getattr__(self, name: str) -> Any:
        # Instance attributes of the opened backend (its schema, prefix, bucket…). An optional
        # member its class does not have (probed with getattr(backend, name, default)) is
        # missing here too, without opening the store.
        if name.startswith("__") or name in _OWN or name in _STATE or name in _PROBED:
            raise AttributeError(name)
        return getattr(self.open(), name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def deferred(factory: type, url: str, options: dict[str, Any]) -> DeferredBackend:
    """A :class:`DeferredBackend` for ``factory`` (a backend class) and ``url``."""
    with _classes_lock:
        cls = _classes.get(factory)
        if cls is None:
            cls = _classes[factory] = _stand_in(factory)
    return cls(url, options)


def backend_class(backend: object) -> Any:
    """The class of ``backend``, or of the backend a :class:`DeferredBackend` opens."""
    return backend.backend_class if isinstance(backend, DeferredBackend) else type(backend)


def _stand_in(factory: type) -> type[DeferredBackend]:
    """A subclass of :class:`DeferredBackend` with ``factory``'s public methods, properties and
    class attributes, each method and property forwarded to the opened backend."""
    members: dict[str, Any] = {"backend_class": factory, "__doc__": DeferredBackend.__doc__}
    for attr in dir(factory):
        if attr.startswith("_") or attr in _OWN or attr == "from_url":
            continue
        value = inspect.getattr_static(factory, attr)
        if isinstance(value, property):
            members[attr] = property(_reader(attr))
        elif inspect.isfunction(value):
            members[attr] = _method(attr)
        elif not isinstance(value, staticmethod | classmethod):
            members[attr] = value  # a class attribute: capability, job_options…
    return type(f"Deferred{factory.__name__}", (DeferredBackend,), members)


def _method(attr: str) -> Any:
    def forward(self: DeferredBackend, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.open(), attr)(*args, **kwargs)

    forward.__name__ = attr
    return forward


def _reader(attr: str) -> Any:
    def read(self: DeferredBackend) -> Any:
        return getattr(self.open(), attr)

    return read


def _name_for(factory: type, url: str) -> str:
    """The name the backend would have once open: its own ``name_for(url)`` if it has one (a
    file's backend names its path), else its kind and URL, password hidden."""
    name_for = getattr(factory, "name_for", None)
    if name_for is not None:
        return str(name_for(url))
    return f"{_kind(factory)} ({BackendURL(url).redacted()})"


def _kind(factory: type) -> str:
    """``Redis``, ``PostgreSQL``, ``NATS``… from the backend's class name."""
    kind = factory.__name__.removesuffix("Backend").removesuffix("Lease").removesuffix("Claim")
    return _KINDS.get(kind, kind)


_KINDS = {"Postgres": "PostgreSQL", "Nats": "NATS", "RabbitMQConsumer": "RabbitMQ"}


def _deadline(factory: type, url: str) -> Any:
    """The backend's deadline as its URL sets it (``None`` for a backend without one)."""
    deadline_for = getattr(factory, "deadline_for", None)
    return None if deadline_for is None else deadline_for(BackendURL(url))

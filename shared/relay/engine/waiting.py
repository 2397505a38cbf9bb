"""Starting while the store is down: every host waits here, then starts as usual.

A host's backend may be deferred (``open_backend(url, deferred=True)``): it is opened by the
first call that needs the store. Before its loop, a host (the standalone scheduler, Celery beat,
``relay-dramatiq``, ``serve()``) calls :func:`wait_for_store`: it opens the backend once the store
answers, trying every ``retry`` seconds, and reports :class:`~relay.events.StoreWaiting` when it
starts waiting and then every ``report_every`` seconds (one line at a steady interval, never one
per try). Meanwhile the host runs nothing and records no heartbeat, so ``relay health`` does not
count it ready. When the store answers it reports :class:`~relay.events.StoreRecovered`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from relay import clock as relay_clock
from relay.contract import ClaimBackend, LeaseBackend
from relay.errors import BackendUnavailable
from relay.events import EventBus, StoreRecovered, StoreWaiting

__all__ = ["REPORT_EVERY", "RETRY", "OpensLater", "wait_for_store"]

RETRY = 1.0
"""Seconds between two tries to reach a store that has not answered since the host started."""
REPORT_EVERY = 30.0
"""Seconds between two ``store_waiting`` reports while a host waits (the longest back-off)."""


@runtime_checkable
class OpensLater(Protocol):
    """A backend opened at its first use (``relay.backends.open_backend(url, deferred=True)``)."""

    @property
    def is_open(self) -> bool:
        """Whether the store answered once and the backend is open."""

    def open(self) -> object:
        """Open it now if it is not open: ``BackendUnavailable`` while the store is down."""


def wait_for_store(
    backend: ClaimBackend | LeaseBackend,
    *,
    owner: str,
    events: EventBus,
    stopping: threading.Event,
    retry: float = RETRY,
    report_every: float = REPORT_EVERY,
    monotonic: Callable[[], float] = relay_clock.monotonic,
) -> bool:
    """Open ``backend`` once its store answers; ``False`` if ``stopping`` was set first.

    A backend that is open already returns ``True`` at once. Any error but
    :class:`~relay.errors.BackendUnavailable` (a bad URL option, a schema to migrate) is raised:
    the host refuses to start, as it would with the store up.
    """
    started = monotonic()
    reported: float | None = None
    while not stopping.is_set():
        try:
            if isinstance(backend, OpensLater):
                backend.open()
        except BackendUnavailable as exc:
            now = monotonic()
            if reported is None or now - reported >= report_every:
                reported = now
                events.emit(StoreWaiting(backend.name, owner, str(exc), now - started, retry))
            stopping.wait(retry)
            continue
        if reported is not None:
            events.emit(StoreRecovered(backend.name, owner, down_for=monotonic() - started))
        return True
    return False

"""Instances' own heartbeats: which schedulers and workers are alive, for probes and listings.

Every host (a standalone scheduler, a Celery beat or worker, a Dramatiq scheduler or worker) keeps
an :class:`InstanceHeartbeat` and calls :meth:`InstanceHeartbeat.maybe_record` from its loop, as
often as it likes: it writes to the store at most once per ``interval``. The lease store keeps one
record per instance (:class:`InstanceInfo`), stamped with the store's clock and expiring ``ttl``
after its last beat. ``relay instances`` lists them; ``relay health`` exits 0 when a matching
instance beat recently, for a liveness or readiness probe.

Claim backends record nothing: they remember only who won each run.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone

from relay.contract import ClaimBackend, LeaseBackend, is_lease
from relay.errors import BackendError, ConfigurationError
from relay.instances import LATE_AFTER_BEATS, ROLES, InstanceInfo, is_alive, is_healthy

__all__ = [
    "DEFAULT_INTERVAL",
    "DEFAULT_TTL",
    "LATE_AFTER_BEATS",
    "ROLES",
    "InstanceHeartbeat",
    "InstanceInfo",
    "is_alive",
    "is_healthy",
]

log = logging.getLogger("relay.health")

DEFAULT_INTERVAL = 10.0
"""Seconds between two heartbeats of an instance."""
DEFAULT_TTL = 3600.0
"""Seconds a record outlives its last beat: a dead instance stays listed (as late) this long."""


class InstanceHeartbeat:
    """Records one instance's heartbeat in a lease store, at most once per ``interval``.

    Cheap to call on every tick: between beats :meth:`maybe_record` reads a monotonic clock and
    returns. A store that cannot be reached is logged and tried again one interval later; it never
    raises into the host's loop. On a claim backend it does nothing. A host with no loop of its
    own (a worker) calls :meth:`start` and :meth:`stop` instead: a daemon thread beats for it.
    """

    def __init__(
        self,
        backend: ClaimBackend | LeaseBackend,
        owner: str,
        role: str,
        *,
        interval: float = DEFAULT_INTERVAL,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if role not in ROLES:
            raise ConfigurationError(f"instance role {role!r} is not known; use one of {ROLES}")
        if not interval > 0 or not ttl >= interval:
            raise ConfigurationError(
                f"heartbeat interval={interval!r} must be positive and ttl={ttl!r} at least as long"
            )
        self.backend = backend
        self.ttl = ttl
        self.info = InstanceInfo(
            owner=owner, role=role, host=socket.gethostname(), pid=os.getpid(),
            started_at=datetime.now(timezone.utc), version=_version(), interval=interval,
        )  # fmt: skip
        self._clock = clock
        self._next: float | None = None
        self._recorded = False
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def maybe_record(self) -> bool:
        """Record a beat if ``interval`` has passed since the last try; ``True`` if recorded."""
        now = self._clock()
        if self._next is not None and now < self._next:
            return False
        self._next = now + self.info.interval
        return self.record()

    def next_at(self) -> float:
        """When (on its clock) :meth:`maybe_record` records the next beat (now before the first)."""
        return self._clock() if self._next is None else self._next

    def report(self, problem: str | None) -> None:
        """Set why the instance is not working although it beats (``None``: it works again).
        A change is recorded at once, so ``relay health`` tells it without waiting a beat."""
        if problem == self.info.problem:
            return
        self.info = replace(self.info, problem=problem)
        self._next = self._clock() + self.info.interval
        self.record()

    def record(self) -> bool:
        """Record a beat now; ``False`` (logged) if the store is a claim store or refused it."""
        if not is_lease(self.backend):
            return False
        try:
            self.backend.record_instance(self.info, self.ttl)
        except BackendError as exc:
            if not self._recorded:  # a host started with its store down: not ready yet
                log.warning("%s waits for the store to answer: %s", self.info.owner, exc)
            else:
                log.warning("could not record the heartbeat of %s: %s", self.info.owner, exc)
            return False
        self._recorded = True
        return True

    def start(self) -> None:
        """Beat now, then every ``interval`` from a daemon thread until :meth:`stop`."""
        if self._thread is not None or not is_lease(self.backend):
            return
        self._stopping.clear()
        self._thread = threading.Thread(
            target=self._beat_until_stopped, name=f"relay-heartbeat-{self.info.role}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread :meth:`start` began (waiting at most ``timeout`` for a beat to end)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _beat_until_stopped(self) -> None:
        while not self._stopping.is_set():
            try:
                self.record()
            except Exception:  # a heartbeat never takes its host down
                log.exception("the heartbeat of %s failed", self.info.owner)
            self._stopping.wait(self.info.interval)


def _version() -> str:
    from relay import __version__  # relay imports this module's users: import it late

    return __version__

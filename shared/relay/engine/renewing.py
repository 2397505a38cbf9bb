"""One heartbeat for all the runs one runner executes, through a store that renews several runs
in one round trip (:class:`~relay.contract.BatchHeartbeat`).

A runner on such a store renews its runs from one thread, and so do runners that share one
:class:`Renewals` (a host's worker threads, each a runner of its own on one backend): each round
sends one ``heartbeat_many`` for every run whose renewal is due (one per lease length), and those
due within half a heartbeat join it a little early (a lease renewed early is only renewed from an
earlier moment), so the runs of one instance come to share one call. Each run keeps its own
rules, as with one heartbeat thread per run (:mod:`relay.engine.running`): a lost run is reported
for that run alone, and through an outage each run lets go once its own lease may have run out.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Protocol

from relay.contract import BatchHeartbeat, ClaimBackend, LeaseBackend, is_lease, renews_many
from relay.errors import BackendUnavailable, StoreTooNew
from relay.runs import Run

__all__ = ["Renewable", "Renewals"]

log = logging.getLogger("relay.runner")


class _Timing(Protocol):
    @property
    def lease(self) -> float: ...

    @property
    def heartbeat(self) -> float: ...


class Renewable(Protocol):
    """What :class:`Renewals` needs of a run it renews: a
    :class:`relay.engine.running.ActiveRun`, which builds on this module."""

    renewed: float
    """When (``time.monotonic()``) the store last renewed its lease."""

    @property
    def run(self) -> Run: ...

    @property
    def runner(self) -> _Timing: ...

    @property
    def stopped(self) -> bool: ...

    def renewal_failed(self, error: str) -> bool: ...

    def next_renewal(self, *, failing: bool) -> float: ...

    def fenced_off(self, operation: str, detail: str, *, lost: bool = True) -> None: ...


class Renewals:
    """Renews the runs :meth:`add` hands it, in one ``heartbeat_many`` per round, until removed.

    Each run is renewed by its runner's ``lease`` every its runner's ``heartbeat``, read at each
    renewal.
    """

    _forking = threading.Lock()

    def __init__(self, backend: BatchHeartbeat) -> None:
        self.backend = backend
        self._start_empty()

    def _in_this_process(self) -> None:
        """Start empty in a child forked from the process that made it: the child has no
        renewing thread, and may have copied the locks held."""
        if self._pid != os.getpid():
            with Renewals._forking:
                if self._pid != os.getpid():
                    self._start_empty()

    def _start_empty(self) -> None:
        self._pid = os.getpid()
        self._due: dict[Renewable, float] = {}
        """Each run renewed, and when (``time.monotonic()``) its next renewal is due."""
        self._state = threading.Lock()
        self._wake = threading.Condition(self._state)
        self._busy = threading.RLock()
        """Held while a round is sent and its answers applied: :meth:`remove` waits for it."""
        self._thread: threading.Thread | None = None

    @classmethod
    def of(cls, backend: ClaimBackend | LeaseBackend) -> Renewals | None:
        """Renewals on ``backend``, if it renews several runs in one call (else None)."""
        return cls(backend) if is_lease(backend) and renews_many(backend) else None

    def add(self, active: Renewable) -> None:
        """Renew ``active`` every heartbeat from now on."""
        self._in_this_process()
        with self._state:
            self._due[active] = time.monotonic() + active.runner.heartbeat
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._renew_until_none, name="relay-heartbeat", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def remove(self, active: Renewable) -> None:
        """Renew ``active`` no more; a round renewing it now is waited for (unless this is the
        renewing thread: an event handler of that round)."""
        self._in_this_process()
        with self._busy, self._state:
            self._due.pop(active, None)

    def _renew_until_none(self) -> None:
        while True:
            with self._state:
                if not self._due:
                    self._thread = None
                    return
                now = time.monotonic()
                first = min(self._due.values())
                if first > now:
                    self._wake.wait(first - now)
                    continue
                by_lease: dict[float, list[Renewable]] = {}
                for active, at in self._due.items():
                    if at <= now + active.runner.heartbeat / 2:
                        by_lease.setdefault(active.runner.lease, []).append(active)
            with self._busy:
                for lease, round_ in by_lease.items():
                    self._renew(round_, lease)

    def _renew(self, round_: list[Renewable], lease: float) -> None:
        with self._state:  # removed since the round was chosen: not renewed
            round_ = [active for active in round_ if active in self._due]
        if not round_:
            return
        sent = time.monotonic()
        runs = [(active.run.id, active.run.token) for active in round_]
        try:
            lost = self.backend.heartbeat_many(runs, lease)
        except Exception as exc:  # one thread renews every run: a bug must not stop the others
            if not isinstance(exc, (BackendUnavailable, StoreTooNew)):
                log.exception("heartbeat of %d runs failed", len(runs))
            for active in round_:
                if active.stopped:  # finishing: the finish loop takes it from here
                    continue
                if active.renewal_failed(str(exc)):
                    self._next(active, active.next_renewal(failing=True))
                else:
                    self._next(active, None)
            return
        for active, why in zip(round_, lost, strict=True):
            if why is None:
                active.renewed = sent
                self._next(active, active.runner.heartbeat)
            else:
                self._next(active, None)
                active.fenced_off("heartbeat", str(why))

    def _next(self, active: Renewable, after: float | None) -> None:
        """Renew ``active`` again ``after`` seconds from now (None: no more), unless it was
        removed meanwhile."""
        with self._state:
            if active not in self._due:
                return
            if after is None:
                del self._due[active]
            else:
                self._due[active] = time.monotonic() + after

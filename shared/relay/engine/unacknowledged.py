"""What a step the store's replicas did not confirm means, decided once for every host.

A store that replicates raises :class:`~relay.errors.NotAcknowledged` for a step its primary did
but too few replicas confirmed in time. A failover could lose such a step, so it counts as not
done, and nothing may be lost or done twice because of it:

* A run won (``acquire``) or started (``start``) without confirmation is not run. It is handed
  back (``release``): a run not started spends no attempt, and any instance, this one included,
  leases it again at its next sweep. If the hand-back is not confirmed either and the store fails
  over, the new primary has neither write, or the lease alone (which then expires and is taken
  over): the run is decided again either way.
* A finish without confirmation is sent again by the runner's finish loop, which retries every
  ``BackendUnavailable``: the same finish by the same token is harmless on every lease backend,
  and the new primary after a failover records it if it lacked it.

A start the store did not answer at all (a worker's, cut off from the store) is not run either,
and cannot be handed back at once: the store is not answering. :class:`HandBackLater` hands it
back once the store answers again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence

from relay.contract import ClaimBackend, LeaseBackend, is_lease
from relay.errors import LeasedRun, LeaseLost, RelayError

__all__ = ["HandBackLater", "hand_back", "what_becomes_of"]

log = logging.getLogger("relay.engine")


def hand_back(backend: LeaseBackend, runs: Sequence[LeasedRun], step: str, why: str) -> None:
    """Release ``runs``, whose ``step`` counts as not done (``why``): they are not run here."""
    for run in runs:
        try:
            backend.release(run.id, run.token)
        except RelayError as exc:
            log.warning(
                "%s of %s counts as not done (%s) and it could not be handed back (%s): it is "
                "not run here; its lease expires and another instance takes it",
                step, run.id, why, exc,
            )  # fmt: skip
        else:
            log.warning(
                "%s of %s counts as not done (%s): not run here, handed back", step, run.id, why
            )


class HandBackLater:
    """Hands back the runs whose ``start`` the store did not answer, once it answers again.

    A worker that could not confirm a start does not run the run, yet the store may hold a lease
    on it that nobody runs: the scheduler's (the start never arrived) or this worker's (only the
    answer was lost). Dropped and nothing more, the run would wait for that lease to run out. A
    run given to :meth:`add` is released by its token, tried every ``every`` seconds from one
    thread, until the store takes it (the run is pending: a scheduler's next sweep leases it
    again, and no attempt counts as failed), refuses it (the token moved on: the run is another's
    already), or ``keep_trying`` seconds have passed (by then every lease the run may have had
    from this start has run out). Safe from any thread; a process forked from the one that made
    it starts with none.
    """

    _forking = threading.Lock()

    def __init__(self, backend: LeaseBackend, keep_trying: float, every: float = 1.0) -> None:
        self.backend = backend
        self.keep_trying = keep_trying
        self.every = every
        self._start_empty()

    @classmethod
    def of(cls, backend: ClaimBackend | LeaseBackend, keep_trying: float) -> HandBackLater | None:
        """One on ``backend`` if it is a lease backend (a claim has nothing to hand back)."""
        return cls(backend, keep_trying) if is_lease(backend) else None

    def _start_empty(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._runs: dict[str, tuple[LeasedRun, float]] = {}
        """Run id: the run and until when (``time.monotonic()``) to try."""
        self._thread: threading.Thread | None = None

    def _in_this_process(self) -> None:
        """Start empty in a child forked from the process that made it: the child has no
        thread handing back, and may have copied the lock held."""
        if self._pid != os.getpid():
            with HandBackLater._forking:
                if self._pid != os.getpid():
                    self._start_empty()

    def add(self, run: LeasedRun) -> None:
        """Hand ``run`` back as soon as the store answers (see the class)."""
        self._in_this_process()
        with self._lock:
            self._runs[run.id] = (run, time.monotonic() + self.keep_trying)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._until_none, name="relay-hand-back", daemon=True
                )
                self._thread.start()

    def discard(self, run_id: str) -> None:
        """Hand ``run_id`` back no more: it is about to be started here after all (a second
        delivery). A hand-back of it under way ends first, so it never releases a run begun
        after it."""
        self._in_this_process()
        if run_id in self._runs:  # the common case, no lock: a run of which nothing is pending
            with self._lock:
                self._runs.pop(run_id, None)

    def __contains__(self, run_id: object) -> bool:
        """Whether ``run_id`` waits to be handed back (no lock: for a log line)."""
        return run_id in self._runs

    def pending(self) -> list[str]:
        """The ids of the runs not handed back yet."""
        self._in_this_process()
        with self._lock:
            return sorted(self._runs)

    def _until_none(self) -> None:
        while True:
            time.sleep(self.every)
            for run_id in self.pending():
                with self._lock:  # one try at a time: add and discard wait for one at most
                    entry = self._runs.get(run_id)
                    if entry is not None and self._try(*entry):
                        del self._runs[run_id]
            with self._lock:
                if not self._runs:
                    self._thread = None
                    return

    def _try(self, run: LeasedRun, until: float) -> bool:
        """One try at releasing ``run``; whether it is done with (released, or given up)."""
        try:
            self.backend.release(run.id, run.token)
        except LeaseLost as exc:
            log.info("%s was not handed back: its token %d moved on (%s)", run.id, run.token, exc)
        except Exception as exc:  # the store's failures, and a backend closed under us
            if time.monotonic() < until:
                return False
            log.warning(
                "%s could not be handed back within %gs of its unanswered start (%s): its lease "
                "runs out and another instance takes it",
                run.id, self.keep_trying, exc,
            )  # fmt: skip
        else:
            log.warning(
                "start of %s counts as not done (the store did not answer it): handed back now "
                "that the store answers",
                run.id,
            )
        return True


def what_becomes_of(unanswered: HandBackLater | None, run_id: str) -> str:
    """What becomes of a run whose start failed on a worker, for the log line that drops its
    message: handed back, or (nothing to hand it back with) left to its lease."""
    if unanswered is not None and run_id in unanswered:
        return "handed back once the store answers"
    return "taken over once its lease runs out"

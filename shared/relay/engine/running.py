"""The running half: start a won run with its token, heartbeat while it runs, finish or release it.

The standalone scheduler, the Celery worker hooks and the Dramatiq middleware all run runs through
a :class:`Runner`, so none of them has rules of its own.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from relay.contract import ClaimBackend, LeaseBackend, is_lease
from relay.errors import BackendUnavailable, LeaseLost
from relay.runs import Run, RunState

__all__ = ["ActiveRun", "Runner", "current_run", "enter_run", "leave_run"]

log = logging.getLogger("relay.runner")
FINISH_TRIES = 3

_current: contextvars.ContextVar[Run | None] = contextvars.ContextVar("relay_run", default=None)


def current_run() -> Run | None:
    """The run being executed in this thread or task, or ``None`` outside a run."""
    return _current.get()


def enter_run(run: Run) -> contextvars.Token[Run | None]:
    """Make :func:`current_run` return ``run`` here, for hosts that start and end runs in two hooks.

    Undo it with :func:`leave_run` and the token, in the same thread.
    """
    return _current.set(run)


def leave_run(token: contextvars.Token[Run | None]) -> None:
    """Undo :func:`enter_run`."""
    _current.reset(token)


class Runner:
    """Executes runs on one backend on behalf of one owner."""

    def __init__(
        self,
        backend: ClaimBackend | LeaseBackend,
        *,
        owner: str,
        lease: float,
        heartbeat: float,
    ) -> None:
        self.backend = backend
        self.owner = owner
        self.lease = lease
        self.heartbeat = heartbeat

    def begin(self, run: Run) -> ActiveRun | None:
        """Start ``run`` under this owner and begin heartbeating; ``None`` if it must not run.

        A run is refused when its token is no longer current, it already finished, or another
        owner started it: a stale or duplicate delivery. ``BackendUnavailable`` propagates: the
        caller must not run what it cannot confirm.
        """
        backend = self.backend
        if not is_lease(backend):
            return ActiveRun(self, run)
        try:
            started = backend.start(run.id, run.token, self.owner, self.lease)
        except LeaseLost as exc:
            log.info("not running %s: %s", run.id, exc)
            return None
        active = ActiveRun(self, started)
        active.start_heartbeat()
        return active

    def execute(self, run: Run, handler: Callable[[Run], Any]) -> RunState | None:
        """Run ``handler(run)`` as one attempt: begin, call, then finish as succeeded or failed.

        Returns the run's new state, or ``None`` if the run was refused or its lease was lost.
        """
        active = self.begin(run)
        return None if active is None else active.call(handler)

    def release(self, run: Run) -> None:
        """Hand ``run`` over so another instance takes it at once (a graceful stop).

        Failures are logged, not raised: the lease then simply expires and is taken over.
        """
        backend = self.backend
        if not is_lease(backend):
            return
        try:
            backend.release(run.id, run.token)
            log.info("handed over %s (token %d)", run.id, run.token)
        except (LeaseLost, BackendUnavailable) as exc:
            log.warning("could not hand over %s: %s", run.id, exc)


class ActiveRun:
    """A run this process is executing: it heartbeats until finished, failed or released."""

    def __init__(self, runner: Runner, run: Run) -> None:
        self.runner = runner
        self.run = run
        self.lost = False
        """Set when a heartbeat found the lease gone: a newer token exists."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start_heartbeat(self) -> None:
        """Renew the lease every ``heartbeat`` seconds from a background thread."""
        self._thread = threading.Thread(
            target=self._beat, name=f"relay-heartbeat-{self.run.id}", daemon=True
        )
        self._thread.start()

    def call(self, handler: Callable[[Run], Any]) -> RunState | None:
        """Call ``handler(run)`` with :func:`current_run` set, then record the outcome.

        Exceptions from the handler are logged and recorded as a failed attempt, never raised.
        """
        token = enter_run(self.run)
        try:
            handler(self.run)
        except Exception as exc:
            log.exception("run %s failed", self.run.id)
            return self.fail(f"{type(exc).__name__}: {exc}")
        finally:
            leave_run(token)
        return self.succeed()

    def succeed(self) -> RunState | None:
        """Record this attempt succeeded."""
        return self._finish(succeeded=True, error=None)

    def fail(self, error: str) -> RunState | None:
        """Record this attempt failed; the run is retried while it has attempts left."""
        return self._finish(succeeded=False, error=error)

    def release(self) -> None:
        """Hand the run over so another instance takes it at once (a graceful stop)."""
        self._stop_heartbeat()
        if not self.lost:
            self.runner.release(self.run)

    def _finish(self, *, succeeded: bool, error: str | None) -> RunState | None:
        self._stop_heartbeat()
        backend = self.runner.backend
        if not is_lease(backend):
            return RunState.SUCCEEDED if succeeded else RunState.FAILED
        for attempt in range(FINISH_TRIES):
            try:
                return backend.finish(self.run.id, self.run.token, succeeded=succeeded, error=error)
            except LeaseLost as exc:
                log.warning("result of %s refused, a newer attempt owns it: %s", self.run.id, exc)
                return None
            except BackendUnavailable as exc:
                log.warning("could not record the result of %s: %s", self.run.id, exc)
                time.sleep(0.5 * 2**attempt)
        # The lease will expire and another instance will take the run over: nothing is lost.
        log.error("gave up recording the result of %s", self.run.id)
        return None

    def _beat(self) -> None:
        backend = self.runner.backend
        assert is_lease(backend)
        while not self._stop.wait(self.runner.heartbeat):
            try:
                backend.heartbeat(self.run.id, self.run.token, self.runner.lease)
            except LeaseLost as exc:
                log.warning("lost the lease of %s: %s", self.run.id, exc)
                self.lost = True
                return
            except BackendUnavailable as exc:
                log.warning("heartbeat of %s failed, will retry: %s", self.run.id, exc)

    def _stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

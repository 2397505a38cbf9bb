"""The running half: start a won run with its token, heartbeat while it runs, finish or release it.

The standalone scheduler, the Celery worker hooks and the Dramatiq middleware all run runs through
a :class:`Runner`, so none of them has rules of its own, and none reports anything itself: the
runner emits started, succeeded, failed, handed over, fenced off, lease lost and abandoned on its
:class:`~relay.events.EventBus`.

Each run's lease is renewed every heartbeat from a thread of its own, or, through a store that
renews several runs in one round trip (``heartbeat_many``), from one thread for all the runs of a
runner, one call per round (:mod:`relay.engine.renewing`).

Through a store that stops answering (a partition, an outage), two rules hold, both timed on this
process's monotonic clock and never against a time the store wrote:

* **Let go.** A lease counts from the moment this runner *sent* the start or heartbeat the store
  last answered (a conservative bound: the store set it later). When a renewal fails and that
  much time has passed, the lease may have run out on the store: ``run.lost`` is set,
  :class:`~relay.events.RunLeaseLost` emitted, and the heartbeat stops. Store calls have a
  deadline shorter than the lease, so this happens within ``lease + deadline`` of the last
  renewal. The handler learns it from ``run.lost`` / ``run.check()``.
* **Finish through an outage.** A finish is retried (back-off doubling to half a heartbeat) until
  the store answers it or refuses the token: a token still current is accepted even after its
  lease ran out, and instances that saw the store fail wait a grace before taking expired runs
  over (:mod:`relay.engine.looping`). Only a stopping host gives up:
  :meth:`Runner.stop_finishing` bounds the wait, then the finish is reported abandoned.
"""

from __future__ import annotations

import contextvars
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from relay import clock as relay_clock
from relay.contract import ClaimBackend, LeaseBackend, is_lease
from relay.engine.renewing import Renewals
from relay.engine.unacknowledged import HandBackLater, hand_back
from relay.errors import BackendError, BackendUnavailable, LeaseLost, NotAcknowledged, StoreTooNew
from relay.events import (
    EventBus,
    FencedOff,
    RunAbandoned,
    RunFailed,
    RunHandedOver,
    RunLeaseLost,
    RunStarted,
    RunSucceeded,
)
from relay.runs import Run, RunState

__all__ = [
    "ActiveRun",
    "FinishLimit",
    "Runner",
    "current_run",
    "enter_run",
    "fenced_write_refused",
    "leave_run",
]

log = logging.getLogger("relay.runner")
FIRST_FINISH_RETRY = 0.25
"""Seconds before a finish the store did not answer is tried again; it doubles up to half a
heartbeat (at most :data:`LAST_FINISH_RETRY`), so a runner retries at least that often once the
store is back."""
LAST_FINISH_RETRY = 5.0
"""The longest wait between two tries of a finish (a heartbeat may be long, or infinite)."""

_current: contextvars.ContextVar[Run | None] = contextvars.ContextVar("relay_run", default=None)
_active: contextvars.ContextVar[ActiveRun | None] = contextvars.ContextVar(
    "relay_active_run", default=None
)


class FinishLimit:
    """When the runners sharing it stop retrying finishes the store does not answer.

    Unset, they retry for as long as it takes; a host sets it when it stops
    (:meth:`stop_within`). Shared by the runners of one host (a worker's threads).
    """

    def __init__(self) -> None:
        self.at: float | None = None
        """The ``time.monotonic()`` after which a finish is given up, once a stop set it."""
        self._set = threading.Event()

    def stop_within(self, seconds: float) -> None:
        """Give up finishes still unrecorded ``seconds`` from now (an earlier limit stays)."""
        at = time.monotonic() + seconds
        if self.at is None or at < self.at:
            self.at = at
        self._set.set()

    def passed(self) -> bool:
        """Whether a finish still unrecorded now is given up."""
        return self.at is not None and time.monotonic() >= self.at

    def pause(self, delay: float) -> None:
        """Wait ``delay`` seconds before a retry, and no later than the limit."""
        if self.at is None:
            self._set.wait(delay)
        else:
            time.sleep(max(0.0, min(delay, self.at - time.monotonic())))


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


def fenced_write_refused(key: str, token: int) -> None:
    """Report that a fenced write of the current run (token ``token``) was refused.

    Called by :mod:`relay.fencing`; emits :class:`~relay.events.FencedOff` (``write``) when the
    write was made inside a run entered with :meth:`ActiveRun.enter` or :meth:`ActiveRun.call`.
    """
    active = _active.get()
    if active is not None and active.run.token == token:
        active.fenced_off("write", f"{key!r} holds a newer token than {token}", lost=False)


class Runner:
    """Executes runs on one backend on behalf of one owner.

    ``renewals``: the :class:`~relay.engine.renewing.Renewals` a host's runners on one backend
    share, so one call renews the runs of them all (default: one of its own, if the store
    renews several runs in one call). ``unanswered``: where a run whose start the store did not
    answer goes to be handed back once it answers (a worker's; default none: the caller hands
    it back, as a scheduler's decider does at its next sweep).
    """

    def __init__(
        self,
        backend: ClaimBackend | LeaseBackend,
        *,
        owner: str,
        lease: float,
        heartbeat: float,
        events: EventBus | None = None,
        clock: Callable[[], float] = relay_clock.time,
        finish_limit: FinishLimit | None = None,
        renewals: Renewals | None = None,
        unanswered: HandBackLater | None = None,
    ) -> None:
        self.backend = backend
        self.owner = owner
        self.lease = lease
        self.heartbeat = heartbeat
        self.events = events if events is not None else EventBus()
        self.clock = clock
        """Seconds since the epoch: a run's start delay is measured from its slot with it."""
        self.finish_limit = finish_limit if finish_limit is not None else FinishLimit()
        """When this runner stops retrying finishes (shared by a host's runners)."""
        self._holding: set[str] = set()
        self._holding_lock = threading.Lock()
        self._renewals = renewals if renewals is not None else Renewals.of(backend)
        """One heartbeat for all this runner's runs (and those of the host's runners that share
        it), if its store renews several in one call."""
        self.unanswered = unanswered
        """Hands back the runs whose start the store did not answer, if given."""

    def holding(self) -> frozenset[str]:
        """The ids of the runs this runner is executing now: begun, and not yet ended.

        Its host's :class:`~relay.engine.Decider` never leases one of them again: a run this
        instance still executes is renewed by its heartbeat, even one that stalled past the lease.
        """
        with self._holding_lock:
            return frozenset(self._holding)

    def _hold(self, run_id: str, held: bool) -> None:
        with self._holding_lock:
            if held:
                self._holding.add(run_id)
            else:
                self._holding.discard(run_id)

    def stop_finishing(self, within: float) -> None:
        """Give up recording finishes the store has not answered ``within`` seconds from now.

        A host calls it when it stops: until then a finish is retried for as long as the store
        does not answer. Each one given up is reported :class:`~relay.events.RunAbandoned`.
        """
        self.finish_limit.stop_within(within)

    def begin(self, run: Run, *, max_attempts: int = 0) -> ActiveRun | None:
        """Start ``run`` under this owner and begin heartbeating; ``None`` if it must not run.

        A run is refused (and reported fenced off) when its token is no longer current, it
        already finished, or another owner started it: a stale or duplicate delivery.
        ``BackendUnavailable`` propagates: the caller must not run what it cannot confirm (a
        start the store's replicas did not confirm is handed back first, one it did not answer
        is given to ``unanswered``, see :mod:`relay.engine.unacknowledged`).
        ``max_attempts`` is the job's, for the failed event (0: not known here).
        """
        backend = self.backend
        if not is_lease(backend):
            return self._started(ActiveRun(self, run, max_attempts or 1))
        if self.unanswered is not None:
            self.unanswered.discard(run.id)
        sent = time.monotonic()  # the lease counts from here: the store set it later
        try:
            started = backend.start(run.id, run.token, self.owner, self.lease)
        except LeaseLost as exc:
            ActiveRun(self, run, max_attempts).fenced_off("start", str(exc))
            return None
        except NotAcknowledged as exc:
            hand_back(backend, [run], "start", str(exc))
            raise
        except BackendUnavailable:
            if self.unanswered is not None:
                self.unanswered.add(run)
            raise
        active = ActiveRun(self, started, max_attempts, renewed=sent)
        self._hold(started.id, True)
        active.start_heartbeat()  # before any hook runs: a slow hook must not cost the lease
        return self._started(active)

    def execute(
        self, run: Run, handler: Callable[[Run], Any], *, max_attempts: int = 0
    ) -> RunState | None:
        """Run ``handler(run)`` as one attempt: begin, call, then finish as succeeded or failed.

        Returns the run's new state, or ``None`` if the run was refused or its lease was lost.
        """
        active = self.begin(run, max_attempts=max_attempts)
        return None if active is None else active.call(handler)

    def _started(self, active: ActiveRun) -> ActiveRun:
        run = active.run
        delay = self.clock() - run.scheduled_for.timestamp()
        self.events.emit(RunStarted(*_values(run, self.owner), start_delay=delay))
        return active

    def release(self, run: Run) -> None:
        """Hand ``run`` over so another instance takes it at once (a graceful stop).

        Failures are logged, not raised: the lease then simply expires and is taken over.
        """
        backend = self.backend
        if not is_lease(backend):
            return
        try:
            backend.release(run.id, run.token)
        except LeaseLost as exc:
            ActiveRun(self, run).fenced_off("release", str(exc))
            return
        except BackendError as exc:  # unavailable, or a layout this Relay can no longer use
            self.abandoned(run, "release", "", str(exc))
            return
        self.events.emit(RunHandedOver(*_values(run, self.owner)))

    def abandoned(self, run: Run, operation: str, outcome: str, error: str) -> None:
        """Report that the store did not answer ``operation`` of ``run``: its lease will run out
        and another instance will take it over."""
        event = RunAbandoned(
            *_values(run, self.owner), operation=operation, outcome=outcome, error=error,
            lease=self.lease,
        )  # fmt: skip
        self.events.emit(event)


class ActiveRun:
    """A run this process is executing: it heartbeats until finished, failed or released."""

    def __init__(
        self, runner: Runner, run: Run, max_attempts: int = 0, *, renewed: float | None = None
    ) -> None:
        self.runner = runner
        self.run = run
        self.max_attempts = max_attempts
        """The job's ``max_attempts`` (0: not known to this runner)."""
        self.lost = False
        """Set when the store refused this attempt's token: a newer attempt owns the run."""
        self.started = time.monotonic()
        self.renewed = self.started if renewed is None else renewed
        """When (``time.monotonic()``) the last renewal the store answered was sent."""
        self.let_go = False
        """Set when the lease could not be renewed in time: ``run.lost`` is set, and the run
        may be taken over; a finish is still tried, and the store decides."""
        self.finishing = False
        """Set once the attempt's end is being recorded: only the finish can end it now."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def enter(self) -> tuple[contextvars.Token[Run | None], contextvars.Token[ActiveRun | None]]:
        """Make this the current run of this thread (:func:`current_run`, fenced writes).

        For hosts that start and end runs in two hooks; undo it with :meth:`leave`.
        """
        return enter_run(self.run), _active.set(self)

    @staticmethod
    def leave(
        tokens: tuple[contextvars.Token[Run | None], contextvars.Token[ActiveRun | None]],
    ) -> None:
        """Undo :meth:`enter`, in the same thread."""
        leave_run(tokens[0])
        _active.reset(tokens[1])

    def fenced_off(self, operation: str, detail: str, *, lost: bool = True) -> None:
        """Report that the store (or a fenced resource) refused this attempt's token.

        ``lost``: the store refused it, so the attempt no longer owns the run (nothing more is
        recorded for it). A refused fenced write only says a newer token of the job wrote the key.
        """
        self.lost = self.lost or lost
        if lost:
            self.run.lost.set()
        runner = self.runner
        runner.events.emit(
            FencedOff(*_values(self.run, runner.owner), operation=operation, detail=detail)
        )

    def start_heartbeat(self) -> None:
        """Renew the lease every ``heartbeat`` seconds from a background thread (none if the
        runner's heartbeat is infinite: :mod:`relay.testing` runs take no time): the runner's
        one for all its runs if its store renews several in one call, else one of its own."""
        if math.isinf(self.runner.heartbeat):
            return
        if self.runner._renewals is not None:
            self.runner._renewals.add(self)
            return
        self._thread = threading.Thread(
            target=self._beat, name=f"relay-heartbeat-{self.run.id}", daemon=True
        )
        self._thread.start()

    def call(self, handler: Callable[[Run], Any]) -> RunState | None:
        """Call ``handler(run)`` with :func:`current_run` set, then record the outcome.

        Exceptions from the handler are reported (with their traceback) and recorded as a failed
        attempt, never raised.
        """
        tokens = self.enter()
        try:
            handler(self.run)
        except Exception as exc:
            return self.fail(f"{type(exc).__name__}: {exc}", exception=exc)
        finally:
            self.leave(tokens)
        return self.succeed()

    def succeed(self) -> RunState | None:
        """Record this attempt succeeded."""
        state = self._finish(succeeded=True, error=None)
        if state is not None:
            values = _values(self.run, self.runner.owner)
            self.runner.events.emit(RunSucceeded(*values, duration=self._duration()))
        return state

    def fail(self, error: str, *, exception: BaseException | None = None) -> RunState | None:
        """Record this attempt failed; the run is retried while it has attempts left."""
        state = self._finish(succeeded=False, error=error)
        if state is not None:
            self.runner.events.emit(
                RunFailed(
                    *_values(self.run, self.runner.owner),
                    max_attempts=self.max_attempts,
                    error=error,
                    duration=self._duration(),
                    final=state is RunState.FAILED,
                    exception=exception,
                )
            )
        return state

    def release(self) -> None:
        """Hand the run over so another instance takes it at once (a graceful stop).

        Does nothing once the run is finishing: its finish, or the give-up of its retries
        (:meth:`Runner.stop_finishing`), ends it.
        """
        if self.finishing:
            return
        self._stop_heartbeat()
        self.runner._hold(self.run.id, False)
        if not self.lost:
            self.runner.release(self.run)
        # Handed over, the attempt no longer owns the run: a coroutine still going is
        # cancelled, and nothing more is recorded for it.
        self.lost = True
        self.run.lost.set()

    def abandon(self) -> None:
        """Stop heartbeating and record nothing, as a process that died would: the lease runs
        out and another instance takes the run over (:mod:`relay.testing` simulates crashes)."""
        self._stop_heartbeat()
        self.runner._hold(self.run.id, False)

    def _finish(self, *, succeeded: bool, error: str | None) -> RunState | None:
        self.finishing = True
        self._stop_heartbeat()
        try:
            return self._record(succeeded=succeeded, error=error)
        finally:
            self.runner._hold(self.run.id, False)

    def _record(self, *, succeeded: bool, error: str | None) -> RunState | None:
        backend = self.runner.backend
        if not is_lease(backend):
            return RunState.SUCCEEDED if succeeded else RunState.FAILED
        if self.lost:  # refused already (and reported): a newer attempt owns the run
            return None
        runner, delay, tries = self.runner, FIRST_FINISH_RETRY, 0
        while True:
            try:
                return backend.finish(self.run.id, self.run.token, succeeded=succeeded, error=error)
            except LeaseLost as exc:
                self.fenced_off("finish", str(exc))
                return None
            except StoreTooNew as exc:  # no retry helps: the lease runs out, a newer Relay takes it
                runner.abandoned(
                    self.run, "finish", "succeeded" if succeeded else "failed", str(exc)
                )
                return None
            except BackendUnavailable as exc:
                unavailable = str(exc)
            tries += 1
            if runner.finish_limit.passed():
                break
            level = logging.WARNING if tries == 1 else logging.DEBUG
            log.log(
                level, "could not record the result of %s, retrying: %s", self.run.id, unavailable
            )
            runner.finish_limit.pause(delay)
            delay = min(delay * 2, max(min(runner.heartbeat / 2, LAST_FINISH_RETRY), delay))
        # The lease will expire and another instance will take the run over: nothing is lost,
        # but what this attempt did may be done again.
        outcome = "succeeded" if succeeded else "failed"
        runner.abandoned(self.run, "finish", outcome, unavailable)
        return None

    def _beat(self) -> None:
        backend = self.runner.backend
        assert is_lease(backend)
        failing = False
        while not self._stop.wait(self.next_renewal(failing=failing)):
            sent = time.monotonic()
            try:
                backend.heartbeat(self.run.id, self.run.token, self.runner.lease)
            except LeaseLost as exc:
                self.fenced_off("heartbeat", str(exc))
                return
            except (BackendUnavailable, StoreTooNew) as exc:  # the lease runs out either way
                if self._stop.is_set():  # finishing: the finish loop takes it from here
                    return
                if not self.renewal_failed(str(exc)):
                    return
                failing = True
                continue
            failing = False
            self.renewed = sent

    @property
    def stopped(self) -> bool:
        """Whether its renewals were stopped: it is finishing, or was released or abandoned."""
        return self._stop.is_set()

    def renewal_failed(self, error: str) -> bool:
        """A renewal the store did not answer: ``False`` if the lease may have run out (the run
        is let go, and renewed no more), else ``True`` (renewal goes on, sooner)."""
        if time.monotonic() - self.renewed >= self.runner.lease:
            self._let_go(error)
            return False
        log.warning("heartbeat of %s failed, will retry: %s", self.run.id, error)
        return True

    def next_renewal(self, *, failing: bool) -> float:
        """Seconds to the next renewal: a heartbeat, or less when the lease runs out sooner."""
        if not failing:
            return self.runner.heartbeat
        left = self.renewed + self.runner.lease - time.monotonic()
        return max(0.0, min(self.runner.heartbeat, left))

    def _let_go(self, error: str) -> None:
        """The lease may have run out on the store: tell the handler, report it, stop renewing."""
        self.let_go = True
        self.run.lost.set()
        runner = self.runner
        silent_for = time.monotonic() - self.renewed
        runner.events.emit(
            RunLeaseLost(
                *_values(self.run, runner.owner), error=error, silent_for=silent_for,
                lease=runner.lease,
            )
        )  # fmt: skip

    def _duration(self) -> float:
        return time.monotonic() - self.started

    def _stop_heartbeat(self) -> None:
        self._stop.set()
        if self.runner._renewals is not None:
            self.runner._renewals.remove(self)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()


def _values(run: Run, owner: str) -> tuple[str, str, Any, int, int, str]:
    """The fields every run event starts with, for ``owner``."""
    return run.id, run.job, run.scheduled_for, run.attempt, run.token, owner

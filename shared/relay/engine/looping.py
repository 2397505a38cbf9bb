"""The deciding loop, written once: tick, sweep, back off, and report, in one :meth:`Loop.step`.

The standalone scheduler, Celery beat and the Dramatiq scheduler each call :meth:`Loop.step` when
it asks to be called, and only map the runs it hands them onto their own lifecycle (a thread, a
published task, an enqueued message). The loop owns every rule of timing:

* a **tick** decides newly due runs; it is skipped (nothing asked of the store, no schedule
  computed) until the earliest next slot of any job;
* on a lease backend a **sweep** takes over expired and handed-over runs every ``sweep_every``;
* when the store cannot answer, the loop forgets what it knew (the next tick re-reads each job's
  history), reports :class:`~relay.events.StoreUnavailable` once, and retries after a back-off that
  doubles up to :data:`MAX_BACKOFF`; the first step that succeeds reports
  :class:`~relay.events.StoreRecovered`;
* with a :class:`~relay.engine.stored.ScheduleFeed`, each step first applies the stored
  schedules' changes (one cheap read when nothing changed), and ticks at once after a change;
* after an outage, the loop takes no expired run over for a **grace** (one lease by default): a
  runner cut off by the same outage keeps retrying its finish, at least every half heartbeat,
  and records it first, so a run that finished during the outage does not run again. Ticks go on
  (they only ask for slots after each job's last recorded one: never a takeover), and sweeps
  lease pending runs (handed over, retried, triggered); only expired leases wait. The tick is
  what finds the store back: no sweep is tried before it answered;
* given a ``role``, a step the store answered also records the instance's own heartbeat
  (:class:`relay.health.InstanceHeartbeat`, at most once per its interval), which declares the
  instance's job definitions; after each beat the fleet's declarations are read once, and the
  jobs another definition decides are not fired here (:mod:`relay.engine.agreeing`). When steps
  have failed for longer than a lease, the heartbeat records that problem, and ``relay health``
  counts the instance unhealthy whatever its last beat; a step that works clears it;
* a store whose layout needs a newer Relay (:class:`~relay.errors.StoreTooNew`) is reported
  once (:class:`~relay.events.StoreIncompatible`); what the step won is handed back, not
  dispatched, and the problem is recorded at once;
* on a lease backend, a step the store answered also checks the jobs' expectations every
  ``watch_every`` (:class:`~relay.engine.watching.Watch`) and announces a job turning overdue,
  failing or recovered, once across the fleet.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from relay import clock as relay_clock
from relay.contract import is_lease
from relay.engine.agreeing import Agreement
from relay.engine.deciding import Decider, Won
from relay.engine.running import Runner
from relay.engine.stored import ScheduleFeed
from relay.engine.watching import DEFAULT_EVERY, Watch
from relay.errors import BackendUnavailable, StoreTooNew
from relay.events import RunDispatched, StoreIncompatible, StoreRecovered, StoreUnavailable
from relay.health import InstanceHeartbeat

__all__ = ["FIRST_BACKOFF", "MAX_BACKOFF", "Loop", "Step"]

log = logging.getLogger("relay.engine")

FIRST_BACKOFF = 1.0
"""Seconds before the first retry after the store failed to answer (at most the loop interval)."""
MAX_BACKOFF = 30.0
"""The longest wait between two retries while the store cannot answer."""
_HORIZON = timedelta(days=5 * 366)

Send = Callable[[Won], bool]
"""Hands a won run to its runner; ``False`` if the host kept it (and handed it back itself).

Raising any exception means it could not be handed over: the loop reports it and hands it back.
"""


@dataclass(frozen=True)
class Step:
    """What one :meth:`Loop.step` did, and when to call it again."""

    won: list[Won] = field(default_factory=list)
    """The runs won in this step (each one was passed to ``send``)."""
    next_in: float = 0.0
    """Seconds until the next step is useful."""
    healthy: bool = True
    """``False`` if the store could not answer: the loop is backing off."""


class Loop:
    """Steps one :class:`Decider`: the only place where runs are decided and dispatched.

    ``interval`` is the longest time from one step's start to the next's (a host's tick: a step
    that took longer is followed at once); ``sweep_every`` how often expired runs are looked for
    on a lease backend (the heartbeat). ``role`` (``"scheduler"``, ``"beat"``,
    ``"dramatiq-scheduler"``) records the instance's heartbeat for ``relay instances`` and
    ``relay health``. ``grace`` (default: the lease) is how long after an outage the loop
    waits before taking expired runs over. ``monotonic`` times sweeps, back-off and the grace; the
    decider's own clock decides which slots are due. Both exist for tests.
    """

    def __init__(
        self,
        decider: Decider,
        *,
        interval: float,
        sweep_every: float,
        role: str | None = None,
        grace: float | None = None,
        monotonic: Callable[[], float] = relay_clock.monotonic,
        schedules: ScheduleFeed | None = None,
        watch_every: float | None = DEFAULT_EVERY,
    ) -> None:
        self.decider = decider
        self.schedules = schedules
        """Stored schedules, applied at the start of each step (``None``: none are read)."""
        self.interval = interval
        self.sweep_every = sweep_every
        self.monotonic = monotonic
        self.events = decider.events
        # Only hands back what could not be dispatched: its lease and heartbeat are never used.
        self.runner = Runner(
            decider.backend, owner=decider.owner, lease=decider.lease, heartbeat=sweep_every,
            events=decider.events,
        )  # fmt: skip
        self.instance = (
            None
            if role is None
            else InstanceHeartbeat(
                decider.backend, decider.owner, role, clock=lambda: self.monotonic()
            )
        )
        """This instance's own heartbeat, recorded from the loop (``None``: not recorded)."""
        self.agreement = None if self.instance is None else Agreement(decider, self.instance)
        """Declares this instance's job definitions with its heartbeat and defers the jobs a
        peer's definition decides (``None`` without a heartbeat)."""
        backend = decider.backend
        self.watch = (
            Watch(
                backend, lambda: list(decider.jobs), decider.events, decider.owner,
                every=watch_every, monotonic=monotonic,
            )
            if is_lease(backend) and watch_every is not None
            else None
        )  # fmt: skip
        """Checks the jobs' expectations (``None``: a claim backend, or ``watch_every=None``)."""
        self.next_sweep = 0.0
        """When the next sweep is due, on ``monotonic``: set it to 0 to sweep at the next step."""
        self.grace = decider.lease if grace is None else grace
        """Seconds after an outage before the loop takes expired runs over again."""
        self.takeover_from = 0.0
        """When (on ``monotonic``) sweeps may take runs over again: the end of the grace."""
        self._first_backoff = min(interval, FIRST_BACKOFF)
        self._backoff = self._first_backoff
        self._retry_at = 0.0
        self._down_since: float | None = None
        self._failing: tuple[float, str] | None = None
        """When (on ``monotonic``) steps began to fail in a row, and the first one's error."""
        self._incompatible = False
        self._wake: datetime | None = None
        self._jobs = 0

    def step(self, send: Send, *, force: bool = False) -> Step:
        """Tick, sweep when due, pass each won run to ``send``, and say when to step again.

        ``force`` ticks and sweeps now, even while backing off or before anything is due; never
        takes an expired run over in the grace after an outage.
        Never raises: ``BackendUnavailable`` is reported as an event, anything else (a bug) is
        logged with its traceback, and either way the step backs off and says when to retry.
        """
        now = self.monotonic()
        if not force and now < self._retry_at:
            return Step([], self._retry_at - now, healthy=False)
        won: list[Won] = []
        failure: Exception | None = None
        try:
            changed = self.schedules is not None and self.schedules.apply()
            if self.agreement is not None and self.agreement.unchecked():
                self._first_beat()
            won += self._tick(force or changed)
            if self.decider.jobs:  # after an outage a tick re-reads history: the store is back
                self._recovered(now)
            if is_lease(self.decider.backend) and (force or now >= self.next_sweep):
                self.next_sweep = now + self.sweep_every
                won += self.decider.sweep(takeovers=now >= self.takeover_from)
        except Exception as exc:  # a host's loop never dies of one step
            failure = exc
            if not isinstance(exc, (BackendUnavailable, StoreTooNew)):  # those are events
                log.exception("a loop step of %s failed; retrying", self.decider.owner)
        if isinstance(failure, StoreTooNew):  # a store this Relay may not use: run nothing
            self._incompatible_store(failure, won)
            won = []
        for item in won:  # runs won before a failure are ours: dispatch them all the same
            self._send(item, send)
        if failure is not None:
            self._report_failing(failure, now)
            return Step(won, self._back_off(failure, now), healthy=False)
        self._recovered(now)
        self._failing = None
        self._beat()
        if self.watch is not None:
            self.watch.maybe_check()
        return Step(won, self._next_in(now))

    def _beat(self) -> None:
        """Record this instance's heartbeat when due, with its job definitions, and then read
        the fleet's definitions (:class:`~relay.engine.agreeing.Agreement`)."""
        if self.instance is None:
            return
        if self.agreement is not None:
            self.agreement.declare()
        working_again = self.instance.info.problem is not None
        self.instance.report(None)  # recorded at once when it clears a problem
        beat = working_again or self.instance.maybe_record()
        if beat and self.agreement is not None and self.agreement.check():
            self._wake = None  # a job fired again: plan it at the next tick

    def _first_beat(self) -> None:
        """Beat and read the fleet's definitions before this instance's first tick, so that it
        fires no job a peer's definition decides (its beats go on at their interval)."""
        assert self.instance is not None and self.agreement is not None
        if self.instance.record() and self.agreement.check():
            self._wake = None

    def next_beat(self) -> float | None:
        """When (on ``monotonic``) this instance must beat on time, or ``None``: while another
        live instance declares one of its jobs, its peers judge from its beats whether it is
        alive, and it reads theirs at each beat."""
        if self.instance is None or self.agreement is None or not self.agreement.watching:
            return None
        return self.instance.next_at()

    def _incompatible_store(self, exc: StoreTooNew, won: list[Won]) -> None:
        """Report once that the store needs a newer Relay, and hand back what was won."""
        if not self._incompatible:
            self._incompatible = True
            self.events.emit(
                StoreIncompatible(self.decider.backend.name, self.decider.owner, str(exc))
            )
        for item in won:
            self.runner.release(item.run)

    def _report_failing(self, exc: Exception, now: float) -> None:
        """Record in the heartbeat why the instance is not working: at once for a store that
        needs a newer Relay, once steps have failed for longer than a lease otherwise."""
        if self._failing is None:
            self._failing = (now, str(exc) or type(exc).__name__)
        since, first = self._failing
        if self.instance is None:
            return
        if isinstance(exc, StoreTooNew):
            self.instance.report(str(exc))
        elif now - since > self.decider.lease:
            lease = self.decider.lease
            self.instance.report(
                f"its steps have failed for longer than a lease ({lease:g}s): {first}"
            )

    def _tick(self, force: bool) -> list[Won]:
        """A decider tick, unless no job has a new slot since the last one."""
        now = datetime.fromtimestamp(self.decider.clock(), timezone.utc)
        jobs = len(self.decider.jobs)
        if not force and jobs == self._jobs and self._wake is not None and now < self._wake:
            return []
        won = self.decider.tick()
        self._jobs = jobs
        self._wake = self._next_slot(now)
        return won

    def _next_slot(self, now: datetime) -> datetime:
        # The decider keeps its jobs' next slots in a queue: the earliest costs nothing to read.
        soonest = self.decider.next_due()
        return soonest if soonest is not None else now + _HORIZON

    def _next_in(self, started: float) -> float:
        # From the step's start: a slow step (a sweep on a loaded store) does not push the next
        # read of stored schedules a whole interval further, so a change waits an interval at most.
        now = self.monotonic()
        wait = self.interval - (now - started)
        if self._wake is not None:
            clock = datetime.fromtimestamp(self.decider.clock(), timezone.utc)
            wait = min(wait, (self._wake - clock).total_seconds() + 0.001)
        if is_lease(self.decider.backend):
            wait = min(wait, self.next_sweep - now)
        beat = self.next_beat()
        if beat is not None:
            wait = min(wait, beat - now)
        if self.watch is not None:
            wait = min(wait, self.watch.due_in())
        return max(wait, 0.0)

    def _send(self, won: Won, send: Send) -> None:
        try:
            sent = send(won)
        except Exception:
            log.exception("could not dispatch %s; handing it back", won.run.id)
            self.runner.release(won.run)
            return
        if sent:
            run = won.run
            self.events.emit(
                RunDispatched(
                    run.id, run.job, run.scheduled_for, run.attempt, run.token, self.decider.owner
                )
            )

    def _back_off(self, exc: Exception, now: float) -> float:
        """Forget progress, report an outage once, and return the wait before the next try."""
        self.decider.forget_progress()
        self._wake = None
        self.next_sweep = 0.0
        delay = self._backoff
        self._backoff = min(delay * 2, MAX_BACKOFF)
        self._retry_at = now + delay
        if self._down_since is None and isinstance(exc, BackendUnavailable):
            self._down_since = now
            self.events.emit(
                StoreUnavailable(
                    backend=self.decider.backend.name,
                    owner=self.decider.owner,
                    error=str(exc),
                    retry_in=delay,
                )
            )
        return delay

    def _recovered(self, now: float) -> None:
        self._backoff = self._first_backoff
        self._retry_at = 0.0
        if self._down_since is not None:
            down_for, self._down_since = now - self._down_since, None
            grace = self.grace if is_lease(self.decider.backend) else 0.0
            self.takeover_from = now + grace
            self.events.emit(
                StoreRecovered(
                    backend=self.decider.backend.name, owner=self.decider.owner,
                    down_for=down_for, takeover_in=grace,
                )
            )  # fmt: skip

"""The deciding half: which slots are due, who wins them, and which expired runs to take over.

A :class:`Decider` asks the store nothing while no new slot is due, so a tick is cheap; when one is,
every due run of every job is decided in one batched call.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

from relay.contract import AcquireRequest, ClaimBackend, LeaseBackend, Outcome, is_lease
from relay.errors import ConfigurationError
from relay.jobs import TICK_SPREAD, Job
from relay.runs import Run, run_id

__all__ = ["ON_TIME_GRACE", "TICK_SPREAD", "Decider", "Won"]

log = logging.getLogger("relay.decider")
UTC = timezone.utc

ON_TIME_GRACE = 60.0
"""Seconds after its slot that a job's latest run is still attempted when catch_up is off."""
MISSED_WINDOW = timedelta(days=1)
"""How far before the catch-up window missed runs are still recorded as skipped."""
_HORIZON = timedelta(days=400)
"""How far ahead a job's next slot is looked for; a job with none is looked at again then."""


@dataclass(frozen=True)
class Won:
    """A run this instance won, with the job it belongs to."""

    run: Run
    job: Job


class _Plan(NamedTuple):
    """What one tick does for one job."""

    due: Sequence[datetime]
    missed: Sequence[datetime]
    decided_until: datetime | None
    """Every slot up to this one is decided once the tick is done (None: nothing new)."""


_NOTHING_NEW = _Plan((), (), None)


class Decider:
    """Decides runs for a set of jobs on one backend, on behalf of one owner."""

    def __init__(
        self,
        backend: ClaimBackend | LeaseBackend,
        *,
        owner: str,
        lease: float,
        clock: Callable[[], float] = time.time,
        grace: float = ON_TIME_GRACE,
    ) -> None:
        self.backend = backend
        self.owner = owner
        self.lease = lease
        self.clock = clock
        self.grace = grace
        self.jobs: dict[str, Job] = {}
        self._decided: dict[str, datetime] = {}
        # A tick plans only the jobs whose next slot has come (a heap of (next slot, name)) and
        # those not decided yet, so an idle tick costs nothing per job.
        self._next: list[tuple[datetime, str]] = []
        self._undecided: set[str] = set()
        self._order: dict[str, int] = {}

    def add(self, job: Job) -> None:
        """Decide ``job`` from the next tick on."""
        if job.name in self.jobs:
            raise ConfigurationError(f"job {job.name!r} is already scheduled: rename one (name=)")
        self.jobs[job.name] = job
        self._undecided.add(job.name)
        self._order[job.name] = len(self._order)

    def forget_progress(self) -> None:
        """Re-read each job's state from the store at the next tick (after the store was down)."""
        self._decided.clear()
        self._next.clear()
        self._undecided = set(self.jobs)

    def next_due(self) -> datetime | None:
        """The earliest next slot of a job decided so far (``None``: no job has one yet)."""
        return self._next[0][0] if self._next else None

    def tick(self) -> list[Won]:
        """Decide every newly due run; return those this instance won.

        Raises ``BackendUnavailable`` if the store cannot answer; nothing is then marked decided,
        so the next tick tries again.
        """
        now = _utc(self.clock())
        # A fresh set each tick: an emptied set keeps its size, and walking it would cost O(jobs).
        names, self._undecided = self._undecided, set()
        while self._next and self._next[0][0] <= now:
            names.add(heapq.heappop(self._next)[1])
        try:
            order = sorted(names, key=self._order.__getitem__)  # the order jobs were added in
            won = self._decide(now, [self.jobs[name] for name in order])
        except BaseException:
            self._undecided |= names  # planned again at the next tick
            raise
        return won

    def _decide(self, now: datetime, jobs: list[Job]) -> list[Won]:
        recorded = self._recorded_history(jobs)
        plans = [(job, self._plan(job, now, recorded)) for job in jobs]
        due = [(job, slot) for job, plan in plans for slot in plan.due]
        backend = self.backend
        if is_lease(backend):
            won = self._acquire(backend, due)
            missed = [(job.name, slot) for job, plan in plans for slot in plan.missed]
            if missed:
                backend.skip_many(missed, "missed")
        else:
            won = self._claim(backend, due)
        for job, plan in plans:
            if plan.decided_until is not None:
                self._decided[job.name] = plan.decided_until
            if job.name in self._decided:
                heapq.heappush(self._next, (_next_slot(job, now), job.name))
            else:
                self._undecided.add(job.name)
        return won

    def sweep(self) -> list[Won]:
        """Take over runs of our jobs whose runner died or handed them over (lease backends)."""
        backend = self.backend
        if not is_lease(backend):
            return []
        records = [r for r in backend.reclaimable() if r.job in self.jobs]
        due = [(self.jobs[r.job], r.scheduled_for) for r in records]
        return self._acquire(backend, due)

    def _plan(self, job: Job, now: datetime, recorded: dict[str, datetime | None]) -> _Plan:
        """The slots of ``job`` to decide now, and those to record as missed.

        ``recorded``: the latest recorded slot of each job not decided before.
        """
        latest = job.schedule.latest_slot(now)
        after = self._decided.get(job.name)
        if latest is None or (after is not None and latest <= after):
            return _NOTHING_NEW
        catch_up, on_time_window = self._windows(job)
        if after is None:
            after = recorded.get(job.name)
        known_history = after is not None
        if after is None:
            # A job with no record yet missed nothing: only its latest slot, if on time.
            catch_up = 0.0
            after = now - timedelta(seconds=on_time_window, microseconds=1)
        oldest_due = now - timedelta(seconds=catch_up)
        on_time = now - timedelta(seconds=on_time_window)
        after = max(after, oldest_due - MISSED_WINDOW)
        due, missed = [], []
        for slot in job.schedule.slots_between(after, now):
            if slot >= oldest_due or (slot == latest and slot >= on_time):
                due.append(slot)
            elif known_history and self.backend.capability == "lease":
                missed.append(slot)
        # Every slot up to the latest is now due, missed, or too late to run: none needs reading
        # from the store again, even when none was due (so a job's record is read once).
        return _Plan(due, missed, latest)

    def _windows(self, job: Job) -> tuple[float, float]:
        """How old a slot may be to be decided: any slot, and the job's latest slot.

        On a lease backend, any slot within ``catch_up``, and the latest one within the grace too.
        A claim backend never catches up, and never claims a slot it may have forgotten.
        """
        backend = self.backend
        if is_lease(backend):
            return job.catch_up, max(job.catch_up, self.grace)
        limit = job.stale_after if job.stale_after is not None else self.grace
        if backend.remembers_for is not None:
            limit = min(limit, max(backend.remembers_for - TICK_SPREAD, 0.0))
        return 0.0, limit

    def _recorded_history(self, jobs: list[Job]) -> dict[str, datetime | None]:
        """The latest recorded slot of each of ``jobs`` not decided yet, in one store call."""
        backend = self.backend
        unknown = [job.name for job in jobs if job.name not in self._decided]
        if not unknown or not is_lease(backend):
            return {}
        return backend.last_slots(unknown)

    def _acquire(self, backend: LeaseBackend, due: Sequence[tuple[Job, datetime]]) -> list[Won]:
        if not due:
            return []
        requests = [
            AcquireRequest(
                job=job.name,
                slot=slot,
                owner=self.owner,
                lease=self.lease,
                max_attempts=job.max_attempts,
                overlap_skip=job.overlap == "skip",
                stale_after=job.stale_after,
            )
            for job, slot in due
        ]
        results = backend.acquire_many(requests)
        won = []
        debug = log.isEnabledFor(logging.DEBUG)
        for (job, slot), result in zip(due, results, strict=True):
            if debug:
                log.debug("%s: %s", run_id(job.name, slot), result.outcome.value)
            if result.outcome is Outcome.WON and result.run is not None:
                won.append(Won(result.run, job))
        return won

    def _claim(self, backend: ClaimBackend, due: Iterable[tuple[Job, datetime]]) -> list[Won]:
        due = list(due)
        if not due:
            return []
        results = backend.claim_many([(job.name, slot) for job, slot in due])
        return [
            Won(Run(run_id(job.name, slot), job.name, slot, 1, 0, self.owner), job)
            for (job, slot), first in zip(due, results, strict=True)
            if first
        ]


def _next_slot(job: Job, now: datetime) -> datetime:
    """The job's first slot after ``now`` (every slot up to ``now`` is decided), or, if it has
    none within :data:`_HORIZON`, the moment to look again."""
    try:
        return next(iter(job.schedule.slots_between(now, now + _HORIZON)), now + _HORIZON)
    except ValueError:  # a cron expression with no date left (croniter's CroniterBadDateError)
        return now + _HORIZON


def _utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)

"""The deciding half: which slots are due, who wins them, and which expired runs to take over.

A :class:`Decider` asks the store nothing while no new slot is due, so a tick is cheap; when one is,
every due run of every job is decided in one batched call. Every decision is reported on the
decider's :class:`~relay.events.EventBus`: won, lost, skipped, exhausted, taken over, retried,
picked up, and the slots recorded missed.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

from relay import clock as relay_clock
from relay.contract import AcquireRequest, ClaimBackend, LeaseBackend, Outcome, is_lease
from relay.engine.reporting import decision_event, missed_events
from relay.engine.unacknowledged import hand_back
from relay.errors import BackendUnavailable, ConfigurationError, NotAcknowledged
from relay.events import EventBus
from relay.jobs import DEFAULT_RETENTION, TICK_SPREAD, Job, jitter_delay, job_spec
from relay.runs import Run, RunRecord, RunState, is_manual, parse_run_id, run_id
from relay.schedule_store import stores_schedules
from relay.schedules import Schedule

__all__ = ["DEFAULT_RETENTION", "ON_TIME_GRACE", "TICK_SPREAD", "Decider", "Won"]

log = logging.getLogger("relay.decider")
UTC = timezone.utc

ON_TIME_GRACE = 60.0
"""Seconds after its slot that a job's latest run is still attempted when catch_up is off."""
MISSED_WINDOW = timedelta(days=1)
"""How far before the catch-up window missed runs are still recorded as skipped."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_HORIZON = timedelta(days=400)
"""How far ahead a job's next slot is looked for; a job with none is looked at again then."""
PRUNE_EVERY = 60.0
"""Seconds between two prunes by one instance."""
PRUNE_BATCH = 500
"""Runs one prune deletes at most: a long history goes in many small steps."""
UNANSWERED_READ = 100
"""The latest runs of a job read to find those an unanswered acquire may have leased (due at the
failed call, they are among the job's latest)."""
UNANSWERED_JOBS_PER_SWEEP = 100
"""Jobs whose unanswered runs one sweep reads (one read per job)."""
NAMES_PER_CALL = 500
"""Jobs named in one store call that reads their history or registers them: an instance starting
with 100,000 jobs never builds one request (and its reply) for all of them at once, and NATS KV
never has more than this many compare-and-swaps in flight."""


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
    """Decides runs for a set of jobs on one backend, on behalf of one owner.

    Each decision is emitted on ``events`` (a new bus, which logs them, if none is given).
    """

    def __init__(
        self,
        backend: ClaimBackend | LeaseBackend,
        *,
        owner: str,
        lease: float,
        clock: Callable[[], float] = relay_clock.time,
        grace: float = ON_TIME_GRACE,
        events: EventBus | None = None,
        retention: float | None = DEFAULT_RETENTION,
    ) -> None:
        self.backend = backend
        self.events = events if events is not None else EventBus()
        self.owner = owner
        self.lease = lease
        self.clock = clock
        self.grace = grace
        self.retention = retention
        """Finished runs older than this are pruned by :meth:`sweep` (``None``: never)."""
        self.jobs: dict[str, Job] = {}
        self._decided: dict[str, datetime] = {}
        # A tick plans only the jobs whose next slot has come (a heap of (next slot, name)) and
        # those not decided yet, so an idle tick costs nothing per job.
        self._next: list[tuple[datetime, str, int]] = []
        self._undecided: set[str] = set()
        self._order: dict[str, int] = {}
        self.prune_every = PRUNE_EVERY
        """Seconds between two prunes by this instance (while its batches come back short)."""
        self.prune_batch = PRUNE_BATCH
        """Runs one prune deletes at most."""
        self._next_prune = 0.0
        self._unregistered: set[str] = set()
        # How many times each replaced or removed job was (0: never). A queue entry carries the
        # count of its time: one made before a replace or remove is skipped when it comes up.
        self._generations: dict[str, int] = {}
        self.holding: Callable[[], AbstractSet[str]] = frozenset
        """The ids of the runs this instance is executing (its runner's ``holding``): never
        acquired again, so an instance never takes over a run it still executes."""
        self.schedule_versions: Mapping[str, int] = {}
        """The version of each stored schedule's job (a ``ScheduleFeed`` shares its own map): a
        run's record keeps the version it was first leased with. Code jobs have none."""
        self.job_at_version: Callable[[Job, int], Job | None] = _no_earlier_version
        """The job of a stored schedule as it was at a version (a ``ScheduleFeed`` sets it), or
        ``None`` if it cannot run here: a run is run with the version its record keeps."""
        self._refused: set[str] = set()
        """Runs won with a schedule version that cannot run here: handed back, not asked for
        again by this instance."""
        self._unstarted: list[Run] = []
        """Runs won here that a host could not start (see :meth:`release_at_next_sweep`)."""
        self._unstarted_lock = threading.Lock()
        self._unanswered: set[str] = set()
        """Runs asked for in an acquire the store did not answer, not answered since but held:
        the store may have leased them to this owner and lost only the answer. The next sweep
        reads them (see :meth:`_hand_back_unanswered`)."""
        self.revision = 0
        """Counts the jobs added, replaced and removed: what depends on the set of jobs (the
        definitions an instance declares) is computed again only when it changed."""
        self.deferred: set[str] = set()
        """Jobs this instance does not fire: another definition of theirs decides them (see
        :meth:`defer`)."""

    def release_at_next_sweep(self, run: Run) -> None:
        """Hand ``run`` back at the next sweep: won here, its start went unanswered (the store
        may have recorded it or not), so nothing runs it here. Released by its token, it is
        pending again and that sweep leases it, instead of waiting for its lease to run out and
        then for the grace after the outage. Safe from any thread."""
        with self._unstarted_lock:
            self._unstarted.append(run)

    def add(self, job: Job) -> None:
        """Decide ``job`` from the next tick on."""
        if job.name in self.jobs:
            raise ConfigurationError(f"job {job.name!r} is already scheduled: rename one (name=)")
        self.jobs[job.name] = job
        self.revision += 1
        self._undecided.add(job.name)
        self._order[job.name] = len(self._order)
        self._unregistered.add(job.name)

    def remove(self, name: str) -> None:
        """Stop deciding job ``name`` (runs already won go on); nothing if it is not scheduled."""
        if self.jobs.pop(name, None) is None:
            return
        self.revision += 1
        self._generations[name] = self._generations.get(name, 0) + 1
        self._decided.pop(name, None)
        self._undecided.discard(name)
        self._unregistered.discard(name)
        self.deferred.discard(name)

    def replace(self, job: Job) -> None:
        """Decide ``job`` in place of the job of its name (or as a new one) from the next tick.

        Its history is read again from the store, so only slots after its last record are due.
        """
        self.remove(job.name)
        self.add(job)

    def defer(self, name: str) -> None:
        """Stop firing job ``name`` (its slots, retries and takeovers) until :meth:`undefer`:
        live instances hold another definition of it, and theirs decides (see
        :mod:`relay.definitions`). Runs already won go on."""
        if name in self.jobs:
            self.deferred.add(name)

    def undefer(self, name: str) -> None:
        """Fire job ``name`` again, from its history in the store: only slots after its last
        recorded one are due (within its catch-up window), as for a job just added."""
        if name not in self.deferred:
            return
        self.deferred.discard(name)
        if name in self.jobs:
            self._generations[name] = self._generations.get(name, 0) + 1
            self._decided.pop(name, None)
            self._undecided.add(name)

    def forget_progress(self) -> None:
        """Re-read each job's state from the store at the next tick (after the store was down)."""
        self._decided.clear()
        self._next.clear()
        self._undecided = set(self.jobs)
        self._unregistered = set(self.jobs)

    def next_due(self) -> datetime | None:
        """When the next tick has something to plan: the earliest next slot of any job (once its
        jitter delay has passed), the epoch while some job is not decided yet, ``None`` if no job
        has a slot."""
        if self._undecided:
            return _EPOCH
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
            _, name, generation = heapq.heappop(self._next)
            if generation == self._generations.get(name, 0) and name in self.jobs:
                names.add(name)  # else queued before the job was replaced or removed
        if self.deferred:  # left out of the queue until undeferred, which re-reads them
            names -= self.deferred
        if not names:  # the idle tick: nothing came due
            return []
        try:
            order = sorted(names, key=self._order.__getitem__)  # the order jobs were added in
            won = self._decide(now, [self.jobs[name] for name in order])
        except BaseException:
            self._undecided |= names  # planned again at the next tick
            raise
        return won

    def _decide(self, now: datetime, jobs: list[Job]) -> list[Won]:
        recorded = self._recorded_history(jobs)
        slots = _TickSlots(now)
        plans = [self._plan(job, slots, recorded) for job in jobs]
        due = [(job, slot) for job, plan in zip(jobs, plans, strict=True) for slot in plan.due]
        backend = self.backend
        if is_lease(backend):
            # Missed slots first: if recording them fails, nothing is won yet that the failure
            # would leave leased but not dispatched (until its lease ran out).
            missed = [
                (job.name, slot)
                for job, plan in zip(jobs, plans, strict=True)
                for slot in plan.missed
            ]
            if missed:
                for event in missed_events(missed, backend.skip_many(missed, "missed"), self.owner):
                    self.events.emit(event)
            # Only slots after a job's last recorded one are due: none has a record to report.
            won = self._acquire(backend, due)
        else:
            won = self._claim(backend, due)
        for job, plan in zip(jobs, plans, strict=True):
            if plan.decided_until is not None:
                self._decided[job.name] = plan.decided_until
            if job.name in self._decided:
                when = slots.next_check(job, self._decided[job.name])
                heapq.heappush(self._next, (when, job.name, self._generations.get(job.name, 0)))
            else:
                self._undecided.add(job.name)
        return won

    def sweep(self, *, takeovers: bool = True) -> list[Won]:
        """Lease the pending runs of our jobs (handed over, failed, triggered, backfilled,
        resumed or buffered) and those whose runner died (lease backends); prune old runs.

        ``takeovers=False`` leaves expired leases alone (the grace after an outage, when their
        runners may still record their finishes)."""
        backend = self.backend
        if not is_lease(backend):
            return []
        if self._unregistered:  # what the jobs are, for `relay jobs` and backfills
            names, self._unregistered = list(self._unregistered), set()
            for at in range(0, len(names), NAMES_PER_CALL):
                page = names[at : at + NAMES_PER_CALL]
                try:
                    backend.register_jobs({name: job_spec(self.jobs[name]) for name in page})
                except BaseException:
                    self._unregistered.update(names[at:])
                    raise
        if self._unstarted:
            with self._unstarted_lock:
                unstarted, self._unstarted = self._unstarted, []
            hand_back(backend, unstarted, "start", "the store did not answer it")
        if self._unanswered:
            self._hand_back_unanswered(backend)
        records = [
            r for r in backend.reclaimable()
            if r.job in self.jobs and r.job not in self.deferred
            and (takeovers or r.state is not RunState.RUNNING)
        ]  # fmt: skip
        won = self._acquire(
            backend, [(self.jobs[r.job], r.scheduled_for) for r in records], records
        )
        self._prune(backend)
        return won

    def _prune(self, backend: LeaseBackend) -> None:
        """Delete one batch of runs past ``retention`` (and of stored schedules removed before
        it, with their history): every ``prune_every`` seconds, or at each sweep while batches
        come back full."""
        if self.retention is None or time.monotonic() < self._next_prune:
            return
        self._next_prune = time.monotonic() + self.prune_every
        pruned = backend.prune(self.retention, self.prune_batch)
        if pruned >= self.prune_batch:
            # A full batch: more may be waiting, so the next sweep prunes again. A store gaining
            # runs faster than one batch per prune_every (a job every 0.1 s) then stays flat.
            self._next_prune = 0.0
        if pruned:
            log.info("pruned %d runs finished more than %gs ago", pruned, self.retention)
        if stores_schedules(backend):  # and the stored schedules removed as long ago
            removed = backend.prune_schedules(self.retention, self.prune_batch)
            if removed >= self.prune_batch:
                self._next_prune = 0.0
            if removed:
                log.info(
                    "pruned %d stored schedules removed more than %gs ago", removed, self.retention
                )

    def _plan(self, job: Job, slots: _TickSlots, recorded: dict[str, datetime | None]) -> _Plan:
        """The slots of ``job`` to decide now, and those to record as missed.

        ``recorded``: the latest recorded slot of each job not decided before.
        """
        now = slots.now
        latest = slots.latest(job.schedule)
        after = self._decided.get(job.name)
        if latest is None and after is None:
            # No slot yet (a cron with none in the past, a stored schedule changed since its
            # last slot): nothing to read or decide until its first slot comes.
            return _Plan((), (), now)
        if latest is None or (after is not None and latest <= after):
            return _NOTHING_NEW
        if job.jitter:
            latest = self._ripe(job, latest, now)
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
        # A jittered slot starts up to `jitter` late: its windows start that much earlier.
        oldest_due = now - timedelta(seconds=catch_up + job.jitter)
        on_time = now - timedelta(seconds=on_time_window + job.jitter)
        after = max(after, oldest_due - MISSED_WINDOW)
        due, missed = [], []
        for slot in job.schedule.slots_between(after, latest):
            if slot >= oldest_due or (slot == latest and slot >= on_time):
                due.append(slot)
            elif known_history and self.backend.capability == "lease":
                missed.append(slot)
        # Every slot up to the latest is now due, missed, or too late to run: none needs reading
        # from the store again, even when none was due (so a job's record is read once). No empty
        # lists kept: at start-up, a plan for each of 100,000 jobs is alive until the tick ends.
        return _Plan(due or (), missed or (), latest)

    @staticmethod
    def _ripe(job: Job, latest: datetime, now: datetime) -> datetime | None:
        """The latest slot whose jitter delay has passed at ``now`` (slots before it too when
        ``jitter`` is shorter than the time between slots, as it should be)."""
        slot: datetime | None = latest
        while (
            slot is not None
            and slot + timedelta(seconds=jitter_delay(job.name, slot, job.jitter)) > now
        ):
            slot = job.schedule.latest_slot(slot - timedelta(microseconds=1))
        return slot

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
        """The latest recorded slot of each of ``jobs`` not decided yet, in one store call per
        :data:`NAMES_PER_CALL` of them."""
        backend = self.backend
        unknown = [job.name for job in jobs if job.name not in self._decided]
        if not unknown or not is_lease(backend):
            return {}
        found: dict[str, datetime | None] = {}
        for at in range(0, len(unknown), NAMES_PER_CALL):
            found.update(backend.last_slots(unknown[at : at + NAMES_PER_CALL]))
        return found

    def _acquire(
        self,
        backend: LeaseBackend,
        due: Sequence[tuple[Job, datetime]],
        records: Sequence[RunRecord] = (),
    ) -> list[Won]:
        """Acquire ``due`` runs; ``records``, when given, are their records (from a sweep)."""
        due, records = self._not_held(due, records)
        if not due:
            return []
        manual = [is_manual(r.id) for r in records] or [False] * len(due)
        versions = self.schedule_versions
        requests = [
            AcquireRequest(
                job=job.name,
                slot=slot,
                owner=self.owner,
                lease=self.lease,
                max_attempts=job.max_attempts,
                overlap_skip=job.overlap == "skip",
                stale_after=job.stale_after,
                buffer_one=job.overlap == "buffer_one",
                manual=is_manual_run,
                schedule_version=versions.get(job.name),
            )
            for (job, slot), is_manual_run in zip(due, manual, strict=True)
        ]
        try:
            results = backend.acquire_many(requests)
        except NotAcknowledged as exc:
            hand_back(backend, exc.won, "acquire", str(exc))
            # A Redis Cluster node that failed may have done its part: as below.
            self._unanswered.update(_ids(due, records))
            raise
        except BackendUnavailable:
            self._unanswered.update(_ids(due, records))
            raise
        if self._unanswered:  # answered now: only a run found held may be the unknown lease
            for i, result in zip(_ids(due, records), results, strict=True):
                if result.outcome is not Outcome.HELD:
                    self._unanswered.discard(i)
        won, refused = [], []
        previous: Sequence[RunRecord | None] = records or [None] * len(due)
        for (job, slot), result, before in zip(due, results, previous, strict=True):
            self.events.emit(
                decision_event(result.outcome, job, slot, self.owner, result.run, before)
            )
            run = result.run
            if result.outcome is not Outcome.WON or run is None:
                continue
            if run.schedule_version not in (None, versions.get(job.name)):
                # Leased before the schedule changed (taken over, retried): it runs as it was.
                earlier = self.job_at_version(job, run.schedule_version)
                if earlier is None:
                    refused.append(run)
                    continue
                job = earlier
            won.append(Won(run, job))
        if refused:
            self._refused.update(run.id for run in refused)
            hand_back(backend, refused, "acquire", "its schedule version cannot run here")
        return won

    def _hand_back_unanswered(self, backend: LeaseBackend) -> None:
        """Hand back the runs an unanswered acquire leased to this owner without its knowing.

        A store that did an acquire and lost its answer (a primary killed before it replied, a
        connection cut) leaves a lease no instance runs: not this one, which does not know it
        won, nor another while the lease is live. Without this, the run would wait for its lease
        to run out and then for the grace after the outage. Each such run whose record names this
        owner, was never started, and is not executing here is released: it is pending again,
        and this sweep leases it.
        """
        held = self.holding()
        jobs: dict[str, set[str]] = {}
        for i in self._unanswered:
            jobs.setdefault(parse_run_id(i)[0], set()).add(i)
        # A bounded read per sweep: a call for thousands of jobs may have gone unanswered, and the
        # runs left for later sweeps are at worst taken over, as they would have been anyway.
        for job, ids in sorted(jobs.items())[:UNANSWERED_JOBS_PER_SWEEP]:
            ours = [
                r for r in backend.runs(job, limit=UNANSWERED_READ)
                if r.id in ids and r.id not in held and r.owner == self.owner
                and r.state is RunState.RUNNING and r.started_at is None
            ]  # fmt: skip
            hand_back(backend, ours, "acquire", "the store did it, but its answer was lost")
            self._unanswered -= ids

    def _not_held(
        self, due: Sequence[tuple[Job, datetime]], records: Sequence[RunRecord]
    ) -> tuple[Sequence[tuple[Job, datetime]], Sequence[RunRecord]]:
        """``due`` (and ``records``) without the runs this instance is executing."""
        held = self.holding()
        if self._refused:
            held = set(held) | self._refused
        if not held:
            return due, records
        ids = _ids(due, records)
        keep = [i for i, run in enumerate(ids) if run not in held]
        return [due[i] for i in keep], [records[i] for i in keep] if records else ()

    def _claim(self, backend: ClaimBackend, due: Iterable[tuple[Job, datetime]]) -> list[Won]:
        due = list(due)
        if not due:
            return []
        results = backend.claim_many([(job.name, slot) for job, slot in due])
        won = []
        for (job, slot), first in zip(due, results, strict=True):
            run = Run(run_id(job.name, slot), job.name, slot, 1, 0, self.owner) if first else None
            outcome = Outcome.WON if first else Outcome.HELD
            self.events.emit(decision_event(outcome, job, slot, self.owner, run, None))
            if run is not None:
                won.append(Won(run, job))
        return won


class _TickSlots:
    """The slots one tick computes, once per schedule rather than once per job.

    Jobs share schedules (:func:`relay.schedules.make_schedule`), so they also share the slot
    objects the decider keeps (100,000 jobs, a few schedules: a few datetimes, not 200,000), and a
    tick steps each cron schedule once. Keyed by ``id``: a schedule need not be hashable, and
    each one outlives the tick.
    """

    def __init__(self, now: datetime) -> None:
        self.now = now
        self._latest: dict[int, datetime | None] = {}
        self._next: dict[tuple[int, datetime], datetime] = {}

    def latest(self, schedule: Schedule) -> datetime | None:
        """``schedule.latest_slot(now)``."""
        key = id(schedule)
        if key not in self._latest:
            self._latest[key] = schedule.latest_slot(self.now)
        return self._latest[key]

    def next_check(self, job: Job, decided: datetime) -> datetime:
        """:func:`_next_check` of ``job`` (a jittered job's own: its delay is the job's)."""
        if job.jitter:
            return _next_check(job, decided, self.now)
        key = (id(job.schedule), decided)
        if key not in self._next:
            self._next[key] = _next_check(job, decided, self.now)
        return self._next[key]


def _next_check(job: Job, decided: datetime, now: datetime) -> datetime:
    """When ``job`` next needs planning: its first slot after ``decided`` (every slot up to it is
    decided), once that slot's jitter delay has passed; or, if it has no slot within
    :data:`_HORIZON`, the moment to look again."""
    try:
        slot = next(iter(job.schedule.slots_between(decided, decided + _HORIZON)), None)
    except ValueError:  # a cron expression with no date left (croniter's CroniterBadDateError)
        slot = None
    if slot is None:
        return max(decided, now) + _HORIZON
    if job.jitter:
        return slot + timedelta(seconds=jitter_delay(job.name, slot, job.jitter))
    return slot


def _ids(due: Sequence[tuple[Job, datetime]], records: Sequence[RunRecord]) -> list[str]:
    """The run ids of ``due`` (from ``records``, when a sweep read them)."""
    return [r.id for r in records] or [run_id(job.name, slot) for job, slot in due]


def _no_earlier_version(job: Job, version: int) -> Job | None:
    """Without stored schedules, no job has another version."""
    return None


def _utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)

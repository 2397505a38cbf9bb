"""The two capabilities a store can offer, written as contracts.

A **claim backend** answers one question for a run, "was I first?", and records nothing else: it
cannot tell that a runner died, so it gives no backups, overlap protection or catch-up.

A **lease backend** keeps a record per run (state, owner, expiry, attempt, fencing token) and
replaces it atomically, so other instances can take over a dead runner's run, skip overlapping runs
and catch up after downtime.

Rules every lease backend follows:

* Each method is one atomic step on the store: a transaction, one Lua script, one compare-and-swap.
  Two instances calling at once see one of them first, never a mix.
* **The store's clock decides expiry** (``now()`` of PostgreSQL, ``TIME`` of Redis, the host's clock
  for SQLite). A backend never compares a caller's clock with a time the store wrote.
* The **fencing token** is an integer per job that grows strictly with every new lease of that job
  (a new run, a takeover, a retry), so two tokens of the same job can always be compared.
  It never goes back, even when the store loses its last writes (a crash before they reached the
  disk, a restart without persistence, a restore from a backup): a new token is
  ``max(last token of the job + 1, store's clock in microseconds since the epoch)``, the clock
  being the one that decides expiry (PostgreSQL's ``clock_timestamp()``, Redis's ``TIME``, the
  NATS server's, the host's for SQLite). A lost write takes the counter back, not the clock, so
  the next token is above every token handed out before, which were at most the clock of their
  time (one lease per microsecond per job keeps the counter from running ahead of it). A clock
  that jumps back cannot break the rule "tokens grow": the counter still grows by one; only a
  loss of writes *and* a clock behind the lost tokens together could hand a token out twice.
* An operation carrying a token that is not the run's current one raises
  :class:`~relay.errors.LeaseLost` and changes nothing.
* Failures to reach the store raise :class:`~relay.errors.BackendUnavailable`, never a driver error.
  A store that replicates may raise :class:`~relay.errors.NotAcknowledged` (one of them) for a step
  its primary did but too few replicas confirmed: the caller treats the step as not done and
  may send it again, so a step that changes a run is safe to repeat: a second ``acquire`` answers
  ``HELD``, a second ``release`` or ``heartbeat`` is refused or renews, and a second ``finish`` by
  the same token returns what the first recorded.

Every lease backend also keeps stored schedules: the contract of :mod:`relay.schedule_store`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

from typing_extensions import TypeIs

from relay.errors import LeaseLost
from relay.instances import InstanceInfo
from relay.runs import Run, RunRecord, RunState, check_slot, run_id

__all__ = [
    "AcquireRequest",
    "AcquireResult",
    "BatchHeartbeat",
    "ClaimBackend",
    "JobHistory",
    "JobInfo",
    "LeaseBackend",
    "MarksOnce",
    "Outcome",
    "PagedJobs",
    "ReadsHistory",
    "is_lease",
    "marks_once",
    "pages_jobs",
    "reads_history",
    "renews_many",
]


class Outcome(str, enum.Enum):
    """What :meth:`LeaseBackend.acquire` decided for one run."""

    WON = "won"
    """A new lease: a fresh run, a takeover of an expired lease, or a retry."""
    HELD = "held"
    """Another owner holds a live lease on the run."""
    FINISHED = "finished"
    """The run is already succeeded, failed or skipped."""
    OVERLAP = "overlap"
    """Recorded skipped: another run of the job holds a live lease and the job skips overlaps."""
    STALE = "stale"
    """Recorded skipped: the run was not started within ``stale_after`` of its slot."""
    EXHAUSTED = "exhausted"
    """Recorded failed: the run had ``max_attempts`` attempts and the last one failed or died."""
    PAUSED = "paused"
    """Recorded skipped: the job is paused (:meth:`LeaseBackend.pause`)."""
    BUFFERED = "buffered"
    """Waiting (recorded pending, reason ``buffered``): another run of the job holds a live lease
    and the job buffers one overlapping run (``overlap="buffer_one"``)."""


@dataclass(frozen=True)
class AcquireRequest:
    """Everything a lease store needs to decide one run in one step."""

    job: str
    slot: datetime
    owner: str
    lease: float
    """Seconds the lease lasts from the store's ``now`` unless renewed."""
    max_attempts: int = 1
    overlap_skip: bool = False
    stale_after: float | None = None
    """Refuse (and record skipped) a run not yet leased once ``now - slot`` exceeds this."""
    buffer_one: bool = False
    """``overlap="buffer_one"``: while another run holds a live lease, this one waits (pending,
    reason ``buffered``) unless one already waits; then it is skipped as an overlap."""
    manual: bool = False
    """A manual run (``slot``: when it was triggered); see :func:`relay.runs.run_id`."""
    schedule_version: int | None = None
    """The version of the stored schedule the run is leased for (``None``: a code job). Stored
    on the run's record when the record is created, or at its first lease if it had none
    (a triggered or backfilled run); a takeover or a retry keeps it, and the won
    :class:`~relay.runs.Run` carries the record's."""

    @property
    def id(self) -> str:
        """The id of the run this request decides."""
        return run_id(self.job, self.slot, manual=self.manual)

    def __post_init__(self) -> None:
        check_slot(self.slot)  # a naive slot would name a different run on each host


@dataclass(frozen=True)
class AcquireResult:
    """The decision for one request: ``run`` is set exactly when ``outcome`` is WON."""

    outcome: Outcome
    run: Run | None = None


@dataclass(frozen=True)
class JobInfo:
    """What a lease store knows of one job: its registered definition and whether it is paused."""

    name: str
    spec: str | None
    """The definition the job's schedulers registered (JSON, see :mod:`relay.control`)."""
    paused_at: datetime | None = None
    paused_by: str | None = None
    paused_reason: str | None = None

    @property
    def paused(self) -> bool:
        """Whether the job is paused."""
        return self.paused_at is not None


@runtime_checkable
class ClaimBackend(Protocol):
    """A store that picks one winner per run and remembers nothing else."""

    capability: Literal["claim"]
    """Always ``"claim"``: lets type checkers and the scheduler tell the two kinds apart."""

    @property
    def name(self) -> str:
        """A short description for messages, such as ``"Redis (strategy=script)"``."""
        ...

    @property
    def remembers_for(self) -> float | None:
        """Seconds a claim is remembered (``None``: for ever).

        A run claimed again after this could be won twice, so the scheduler never claims a slot
        older than this (minus the spread between instances' ticks).
        """
        ...

    def claim(self, job: str, slot: datetime) -> bool:
        """Atomically claim the run of ``job`` at ``slot``: ``True`` for exactly one caller.

        Idempotent for losers: asking again after losing answers ``False``. Raises
        ``BackendUnavailable`` when the store cannot answer; the caller must then not run the job.
        """
        ...

    def claim_many(self, runs: Sequence[tuple[str, datetime]]) -> list[bool]:
        """:meth:`claim` for several runs, in as few round trips as the store allows."""
        ...

    def close(self) -> None:
        """Release connections. Idempotent."""
        ...


@runtime_checkable
class LeaseBackend(Protocol):
    """A store that keeps one lease record per run and replaces it atomically."""

    capability: Literal["lease"]
    """Always ``"lease"``: lets type checkers and the scheduler tell the two kinds apart."""

    @property
    def name(self) -> str:
        """A short description for messages, such as ``"SQLite (relay.db)"``."""
        ...

    def acquire(self, request: AcquireRequest) -> AcquireResult:
        """Decide one run in one atomic step, on the store's clock.

        * no record: if ``stale_after`` has passed since the slot, record it skipped (``stale``);
          else if ``overlap_skip`` and another run of the job holds a live lease, record it skipped
          (``overlap``); else lease it: attempt 1, a new token.
        * running with a live lease: ``HELD``. Succeeded, failed or skipped: ``FINISHED``.
        * running with an expired lease (its runner died) or pending after a failure: if it has
          failed ``max_attempts`` times, record it failed (``EXHAUSTED``); else lease it again with
          attempt + 1 and a new token.
        * pending after a hand-over: lease it again (a hand-over is not a failure).

        The ``max_attempts`` of the first lease is stored with the run and used from then on.
        """
        ...

    def acquire_many(self, requests: Sequence[AcquireRequest]) -> list[AcquireResult]:
        """:meth:`acquire` for several runs in one round trip, each decided in order."""
        ...

    def start(self, run_id: str, token: int, owner: str, lease: float) -> Run:
        """Mark the run started by ``owner`` and renew its lease: the running half takes it over.

        Raises ``LeaseLost`` (changing nothing) if ``token`` is not the run's current token, the
        run is no longer running (finished, or handed over), or another owner already started it.
        Starting again by the same owner is allowed (a redelivery to the same worker).
        """
        ...

    def heartbeat(self, run_id: str, token: int, lease: float) -> None:
        """Extend the lease to ``now + lease`` on the store's clock.

        Raises ``LeaseLost`` if ``token`` is not current or the run is not running. A lease that
        expired but was not yet taken over is renewed: nobody else has it.
        """
        ...

    def finish(
        self, run_id: str, token: int, *, succeeded: bool, error: str | None = None
    ) -> RunState:
        """Record the outcome of the attempt holding ``token``; return the run's new state.

        Success gives ``SUCCEEDED``. Failure gives ``PENDING`` (any instance may retry it at once)
        while the run has failed fewer than its ``max_attempts`` times, then ``FAILED``.

        The same finish sent again by the token that finished the run (its answer was lost, or
        its replicas did not confirm it) returns the state that finish recorded and changes
        nothing: a failure is not counted twice. Otherwise raises ``LeaseLost`` for a token that
        is not current or a run that is not running (handed over, or recorded failed or skipped
        by an acquire), and heartbeat, start and release of a finished run stay refused. A token
        still current is accepted even after its lease's time ran out: nobody took the run over,
        so a runner cut off from the store longer than its lease records what it did.
        """
        ...

    def release(self, run_id: str, token: int) -> None:
        """Hand the run over: it becomes ``PENDING`` and any instance may lease it at once.

        Used on a graceful stop. Not a failure: it does not count against ``max_attempts``.
        A run not started yet (:meth:`start` was never called for this token: a won run its store
        did not confirm, or that could not be dispatched) also gives its attempt back: the next
        lease has the same attempt number. Raises ``LeaseLost`` like :meth:`heartbeat`.
        """
        ...

    def skip(self, job: str, slot: datetime, reason: str) -> bool:
        """Record the run skipped with ``reason`` unless it has a record; ``True`` if recorded."""
        ...

    def skip_many(self, runs: Sequence[tuple[str, datetime]], reason: str) -> list[bool]:
        """:meth:`skip` for each ``(job, slot)``, in as few round trips as the store allows.

        An instance back after downtime records every slot it missed, thousands of them at times.
        """
        ...

    def last_slot(self, job: str) -> datetime | None:
        """The latest slot of ``job`` that has any record, for catch-up after downtime."""
        ...

    def last_slots(self, jobs: Sequence[str]) -> dict[str, datetime | None]:
        """:meth:`last_slot` of each of ``jobs``, in as few round trips as the store allows.

        A scheduler reads the history of all its jobs when it starts: one call, not one per job.
        """
        ...

    def reclaimable(self, limit: int = 100) -> list[RunRecord]:
        """Runs another instance may lease now: running with an expired lease, or pending.

        A hint for the scheduler's sweep; :meth:`acquire` decides for real.
        """
        ...

    def runs(self, job: str | None = None, limit: int = 50) -> list[RunRecord]:
        """The most recent runs (of ``job``, or of every job), newest slot first."""
        ...

    def now(self) -> datetime:
        """The store's clock: the one that decides expiry."""
        ...

    def record_instance(self, info: InstanceInfo, ttl: float) -> None:
        """Record a heartbeat of the instance ``info.owner``, replacing its previous record.

        One upsert on the store's clock: the record's ``beat_at`` is the store's ``now`` and its
        ``expires_at`` ``ttl`` seconds later (the ``beat_at`` and ``expires_at`` of ``info`` are
        ignored). An expired record is gone for :meth:`instances`; stores that can expire keys
        (Redis) or messages (NATS) let them, the others delete expired records here.
        """
        ...

    def instances(self) -> list[InstanceInfo]:
        """Every instance whose record has not expired, by role then owner. Writes nothing."""
        ...

    # -- the control plane: every instance obeys these at its next tick, no restart ---------

    def register_jobs(self, specs: dict[str, str]) -> None:
        """Record each job's definition (name -> JSON text), for ``relay jobs`` and backfills."""
        ...

    def jobs(self) -> list[JobInfo]:
        """Every job the store knows (registered, or with a run), by name."""
        ...

    def pause(self, job: str, reason: str, by: str) -> bool:
        """Pause ``job``: from now on, :meth:`acquire` records its new slots skipped (``PAUSED``).

        Runs already recorded (running, pending, retries, manual runs) go on. Records who paused
        it, when (on the store's clock) and why. ``False`` if it was paused already (the first
        pause's record stays).
        """
        ...

    def resume(self, job: str, catch_up: float | None = None) -> list[str]:
        """Resume ``job`` (a job not paused is left as it is). Nothing runs because of it, unless

        ``catch_up`` (seconds) is given: then the runs recorded skipped ``paused`` whose slot is at
        most that old become pending (reason ``resumed``) and any instance's sweep runs them.
        Returns the ids of those runs.
        """
        ...

    def trigger(self, job: str, overlap_skip: bool = False) -> RunRecord:
        """Create a manual run of ``job`` now, pending (reason ``manual``); any sweep leases it.

        Its id is ``run_id(job, now, manual=True)`` on the store's clock. With ``overlap_skip``,
        if another run of the job holds a live lease, it is recorded skipped (``overlap``) instead.
        """
        ...

    def backfill(self, job: str, slots: Sequence[datetime], serial: bool = False) -> list[bool]:
        """Record each slot's run pending (reason ``backfill``) unless it has a record.

        A slot that already ran (or is running, or was skipped) is left as it is: ``False``.
        With ``serial`` the runs are recorded ``buffered`` instead: each waits while another run
        of the job holds a live lease, so they run one at a time.
        """
        ...

    def prune(self, older_than: float, limit: int = 500) -> int:
        """Delete up to ``limit`` finished runs that finished more than ``older_than`` seconds ago.

        Never a running or pending run, nor the run of each job's latest slot (catch-up reads it).
        Returns how many were deleted; call again while it returns ``limit``.
        """
        ...

    def close(self) -> None:
        """Release connections. Idempotent."""
        ...


def is_lease(backend: ClaimBackend | LeaseBackend) -> TypeIs[LeaseBackend]:
    """Whether ``backend`` is a lease backend (the only check the engine makes, once per call)."""
    return backend.capability == "lease"


@runtime_checkable
class BatchHeartbeat(LeaseBackend, Protocol):
    """A lease backend that also renews several runs in one round trip (optional).

    The engine's runner uses it when its backend has it, and one heartbeat per run otherwise.
    """

    def heartbeat_many(
        self, runs: Sequence[tuple[str, int]], lease: float
    ) -> list[LeaseLost | None]:
        """:meth:`LeaseBackend.heartbeat` of each ``(run_id, token)``, in one round trip.

        Per run, in order: ``None`` if renewed, else the ``LeaseLost`` that ``heartbeat`` would
        have raised for it (returned, not raised: the other runs are renewed all the same). A
        store that cannot be reached raises ``BackendUnavailable`` for the whole call.
        """
        ...


def renews_many(backend: LeaseBackend) -> TypeIs[BatchHeartbeat]:
    """Whether ``backend`` renews several runs in one round trip (:class:`BatchHeartbeat`)."""
    return callable(getattr(backend, "heartbeat_many", None))


@runtime_checkable
class PagedJobs(LeaseBackend, Protocol):
    """A lease store that reads its jobs a page at a time (optional).

    :class:`relay.Control` uses it for one job and for a page of jobs (the web console), and
    :meth:`LeaseBackend.jobs` (every job) otherwise. Reads only.
    """

    def job_page(self, after: str = "", limit: int = 50, prefix: str = "") -> list[JobInfo]:
        """At most ``limit`` jobs whose names sort after ``after`` and start with ``prefix``, by
        name: what :meth:`LeaseBackend.jobs` says of them, in one range read of the store's
        index of job names where it has one."""
        ...

    def job_infos(self, names: Sequence[str]) -> list[JobInfo]:
        """What :meth:`LeaseBackend.jobs` says of each of ``names`` the store knows, by name
        (an unknown name is left out), read by name."""
        ...


def pages_jobs(backend: LeaseBackend) -> TypeIs[PagedJobs]:
    """Whether ``backend`` reads its jobs a page at a time (:class:`PagedJobs`)."""
    return callable(getattr(backend, "job_page", None)) and callable(
        getattr(backend, "job_infos", None)
    )


@dataclass(frozen=True)
class JobHistory:
    """What a lease store read of one job's recent runs, for :mod:`relay.overdue`."""

    recent: tuple[RunRecord, ...]
    """Its newest slot runs (manual runs left out), newest slot first."""
    last_success: RunRecord | None
    """Its succeeded run of the newest slot or trigger time, manual runs included."""


@runtime_checkable
class ReadsHistory(LeaseBackend, Protocol):
    """A lease backend that reads the recent runs of many jobs at once (optional).

    :mod:`relay.overdue` uses it when its backend has it, and one :meth:`LeaseBackend.runs`
    per job otherwise.
    """

    def job_history(self, jobs: Sequence[str], depth: int) -> dict[str, JobHistory]:
        """Each of ``jobs``: its ``depth`` newest slot runs and its latest success.

        One round trip for the whole batch where the store allows it. Writes nothing. A job
        with no run has an empty history.
        """
        ...


def reads_history(backend: LeaseBackend) -> TypeIs[ReadsHistory]:
    """Whether ``backend`` reads many jobs' histories in one call (:class:`ReadsHistory`)."""
    return callable(getattr(backend, "job_history", None))


@runtime_checkable
class MarksOnce(LeaseBackend, Protocol):
    """A lease backend that records a key once (optional): the engine's announcements of a job
    turning overdue, failing or recovered are made once across the fleet with it."""

    def mark_once(self, key: str, ttl: float) -> bool:
        """Record ``key`` for ``ttl`` seconds (the store's clock); ``True`` for exactly one caller.

        Atomic: of callers racing on one key, one gets ``True``, and every caller after it too
        gets ``False`` until ``ttl`` has passed. Expired keys are deleted on the way.
        """
        ...


def marks_once(backend: LeaseBackend) -> TypeIs[MarksOnce]:
    """Whether ``backend`` records keys once (:class:`MarksOnce`)."""
    return callable(getattr(backend, "mark_once", None))

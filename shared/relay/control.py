"""The control plane: see every job, pause, resume, trigger, backfill and prune, from anywhere;
add, change and remove stored schedules (:mod:`relay.control_schedules`).

:class:`Control` is the Python API the ``relay`` command calls. It talks to the lease store only,
so it works from any machine that reaches the store, while the schedulers run: every instance obeys
a pause, a resume or a trigger at its next tick or sweep, without a restart. Claim backends keep no
runs to control: each operation raises :class:`~relay.errors.UnsupportedOption` on them.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Literal

from relay import arguments as check
from relay.backends import capability_of, open_backend
from relay.contract import ClaimBackend, JobInfo, LeaseBackend, is_lease, pages_jobs
from relay.control_schedules import JobStatus, ScheduleControl, operator
from relay.definitions import Choice, deciding
from relay.doctor import DoctorReport, diagnose
from relay.errors import ConfigurationError, InvalidArgument, UnsupportedOption
from relay.jobs import LEASE_BACKENDS, jitter_delay
from relay.overdue import JobHealth, ranked, read_health
from relay.runs import RunRecord, RunState
from relay.schedule_store import stores_schedules
from relay.schedules import Schedule, make_schedule
from relay.upcoming import NextRun, next_runs

__all__ = ["MAX_BACKFILL", "Control", "JobStatus"]

MAX_BACKFILL = 1000
"""The most runs one backfill creates: a longer range is refused (split it, or widen the slots)."""
PRUNE_BATCH = 500
"""Runs one store call of :meth:`Control.prune` deletes at most."""
RUNS_MAX = 100_000
"""The most runs one call of :meth:`Control.runs` returns."""
NEXT_MAX = 1000
"""The most slots one call of :meth:`Control.next_runs` lists."""


class Control(ScheduleControl):
    """Operate the jobs and stored schedules of one store: ``Control("postgresql://…")`` or a
    backend object.

    A URL is opened here and closed by :meth:`close` (or ``with Control(url) as control:``); a
    backend passed in stays the caller's. ``read_only=True`` opens the URL for reading only
    (:meth:`jobs` and :meth:`job` work; nothing is created, and a missing store raises
    :class:`~relay.errors.StoreNotFound`).

    Every method checks its arguments before the store is touched (:mod:`relay.arguments`): a
    wrong type or value raises :class:`~relay.errors.InvalidArgument` naming the parameter, the
    same on every store.
    """

    def __init__(
        self, backend: str | ClaimBackend | LeaseBackend, *, read_only: bool = False
    ) -> None:
        if not isinstance(backend, str) and getattr(backend, "capability", None) not in (
            "claim",
            "lease",
        ):
            raise InvalidArgument(
                "backend", backend, "a backend URL (a string) or an object from open_backend(url)"
            )
        if not isinstance(read_only, bool):
            raise InvalidArgument("read_only", read_only, "True or False")
        self._owns = isinstance(backend, str)
        if isinstance(backend, str):
            # A claim URL is opened as it is, so each operation refuses it with UnsupportedOption.
            read_only = read_only and capability_of(backend) == "lease"
            backend = open_backend(backend, read_only=read_only)
        self.backend: ClaimBackend | LeaseBackend = backend

    def __enter__(self) -> Control:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the backend if this object opened it."""
        if self._owns:
            self.backend.close()

    # -- reading ---------------------------------------------------------------------------

    def jobs(self) -> list[JobStatus]:
        """Every job the store knows, by name: schedule, next due, last run, live leases, pause."""
        store = self._lease("jobs")
        now = store.now()
        choices = deciding(store.instances(), now)
        statuses = [self._status(store, info, now, choices.get(info.name)) for info in store.jobs()]
        return self._with_stored(statuses, now)

    def jobs_page(
        self, after: str = "", limit: int = 50, prefix: str = ""
    ) -> tuple[list[JobStatus], bool]:
        """A page of :meth:`jobs`: at most ``limit`` jobs whose names sort after ``after`` and
        start with ``prefix``, by name, and whether more follow (the next page starts after the
        last name). Only the page's jobs are read, with their runs and stored-schedule notes, on
        a store that reads its jobs a page at a time (:class:`~relay.contract.PagedJobs`)."""
        store = self._lease("jobs")
        now = store.now()
        if pages_jobs(store):
            found = store.job_page(after, limit + 1, prefix)
        else:
            found = [i for i in store.jobs() if i.name > after and i.name.startswith(prefix)]
        infos = {info.name: info for info in found}
        stored: dict[str, Any] = {}
        if stores_schedules(store):
            stored = {
                s.name: s for s in self.schedules() if s.name > after and s.name.startswith(prefix)
            }
        names = sorted(infos.keys() | stored.keys())
        page = names[:limit]
        choices = deciding(store.instances(), now, page)
        statuses = [
            self._status(store, infos[name], now, choices.get(name))
            for name in page
            if name in infos
        ]
        shown = {name: stored[name] for name in page if name in stored}
        return self._with_stored(statuses, now, shown), len(names) > limit

    def health(self, jobs: list[str] | None = None) -> list[JobHealth]:
        """Each job's standing against its expectations, overdue and failing jobs first: its
        last success, its oldest slot not yet succeeded and when it should have succeeded
        (:mod:`relay.overdue`). Reads the store in O(jobs), one call per batch of jobs."""
        return ranked(read_health(self._lease("health"), jobs))

    def runs(self, job: str | None = None, limit: int = 50) -> list[RunRecord]:
        """The most recent runs (of ``job``, or of every job), newest slot first; a run of a
        stored schedule has the ``schedule_version`` it was first leased with."""
        if job is not None:
            check.name(job, "job")
        check.count(limit, "limit", 1, RUNS_MAX)
        return self._lease("runs").runs(job, limit)

    def next_runs(self, job: str, count: int = 5) -> list[NextRun]:
        """The next ``count`` runs of ``job`` after the store's clock, as its schedulers
        registered it: each slot, when it starts after the job's jitter (UTC and the job's time
        zone), and whether the job's pause will skip it. Reads only."""
        check.name(job, "job")
        check.count(count, "count", 1, NEXT_MAX)
        store = self._lease("next")
        info = self._known(store, job)
        paused = info.paused_at is not None
        return next_runs(job, _spec(info), store.now(), count, paused=paused)

    def job(self, name: str) -> JobStatus:
        """One job's status; :class:`ConfigurationError` naming the known jobs if it is unknown."""
        check.name(name, "name")
        store = self._lease("jobs")
        info = self._known(store, name)
        now = store.now()
        return self._status(store, info, now, deciding(store.instances(), now, [name]).get(name))

    def doctor(self) -> DoctorReport:
        """What the store, as it is configured, can cost when a Relay process crashes, the
        store restarts or loses power, a replica is promoted, or the network splits.

        Reads the store's own settings and creates nothing (:mod:`relay.doctor`). A claim
        backend raises :class:`ConfigurationError` saying what a claim store can cost.
        """
        return diagnose(self.backend)

    # -- changing --------------------------------------------------------------------------

    def pause(self, job: str, reason: str = "", *, by: str | None = None) -> bool:
        """Pause ``job`` on every instance from its next tick: its slots are recorded
        ``skipped (paused)``. ``by`` defaults to ``user@host``. ``False`` if already paused."""
        check.name(job, "job")
        check.text(reason, "reason", check.REASON_MAX)
        if by is not None:
            check.text(by, "by", check.BY_MAX)
        store = self._lease("pause")
        self._known(store, job)
        return store.pause(job, reason, by or operator())

    def resume(
        self,
        job: str,
        *,
        missed: Literal["skip", "catch_up"] = "skip",
        window: float | None = None,
    ) -> list[str]:
        """Resume ``job``. Nothing runs because of the resume itself.

        ``missed="skip"`` leaves the slots that passed while paused skipped. ``"catch_up"`` runs
        those within the job's ``catch_up`` window (or ``window`` seconds), as after downtime:
        their runs become pending and the instances' next sweep runs them. Returns their ids.
        """
        check.name(job, "job")
        if missed not in ("skip", "catch_up"):
            raise InvalidArgument("missed", missed, "'skip' or 'catch_up'")
        if window is not None:
            check.seconds(window, "window", zero=False)
        store = self._lease("resume")
        info = self._known(store, job)
        if missed == "skip":
            return store.resume(job)
        span = window if window is not None else float(_spec(info).get("catch_up") or 0)
        if span <= 0:
            raise ConfigurationError(
                f"job {job!r} has no catch_up window: pass window= (--window) in seconds to say "
                "how far back the slots missed while paused should run"
            )
        return store.resume(job, catch_up=span)

    def trigger(self, job: str, *, overlap: Literal["allow", "skip"] = "allow") -> RunRecord:
        """Run ``job`` now, once, as a manual run (id ``job@manual:<time>``): pending until an
        instance's sweep leases it, then fenced, retried and recorded like any run.

        ``overlap="skip"`` records it skipped instead if another run of the job holds a live lease.
        """
        check.name(job, "job")
        if overlap not in ("allow", "skip"):
            raise InvalidArgument("overlap", overlap, "'allow' or 'skip'")
        store = self._lease("trigger")
        self._known(store, job)
        return store.trigger(job, overlap_skip=overlap == "skip")

    def backfill(
        self,
        job: str,
        start: datetime,
        end: datetime,
        *,
        overlap: Literal["allow", "buffer_all"] = "allow",
    ) -> list[tuple[datetime, bool]]:
        """Create the runs of every slot of ``job`` from ``start`` to ``end`` (both included).

        Each goes through the lease: a slot that already has a record (it ran, runs, or was
        skipped) is not run again (``False``). At most :data:`MAX_BACKFILL` slots; ``end`` may not
        be in the future. ``overlap="buffer_all"`` runs them one at a time, else side by side.
        """
        check.name(job, "job")
        check.aware(start, "start")
        check.aware(end, "end")
        if overlap not in ("allow", "buffer_all"):
            raise InvalidArgument("overlap", overlap, "'allow' or 'buffer_all'")
        store = self._lease("backfill")
        schedule = _schedule(self._known(store, job))
        slots = _backfill_slots(schedule, start, end, store.now())
        created = store.backfill(job, slots, serial=overlap == "buffer_all")
        return list(zip(slots, created, strict=True))

    def prune(self, older_than: float) -> int:
        """Delete the finished runs older than ``older_than`` seconds, in bounded batches; never a
        live or pending run, nor any job's latest. Returns how many were deleted.

        Stored schedules removed more than ``older_than`` seconds ago go too, with their history
        (a disabled schedule never does); they are not counted."""
        check.seconds(older_than, "older_than")
        store = self._lease("prune")
        total = 0
        while (deleted := store.prune(older_than, PRUNE_BATCH)) > 0:
            total += deleted
        if stores_schedules(store):
            while store.prune_schedules(older_than, PRUNE_BATCH) >= PRUNE_BATCH:
                pass
        return total

    # -- helpers ---------------------------------------------------------------------------

    def _lease(self, operation: str) -> LeaseBackend:
        backend = self.backend
        if not is_lease(backend):
            raise UnsupportedOption(operation, backend.name, LEASE_BACKENDS)
        return backend

    @staticmethod
    def _known(store: LeaseBackend, job: str) -> JobInfo:
        if pages_jobs(store):
            found = store.job_infos([job])
            if found:
                return found[0]
        jobs = {info.name: info for info in store.jobs()}
        if job not in jobs:
            known = ", ".join(sorted(jobs)) or "none yet: start a scheduler first"
            raise ConfigurationError(f"no job named {job!r} in {store.name}; known jobs: {known}")
        return jobs[job]

    @staticmethod
    def _status(
        store: LeaseBackend, info: JobInfo, now: datetime, choice: Choice | None
    ) -> JobStatus:
        spec = _spec(info)
        runs = store.runs(info.name, limit=20)
        live = tuple(
            r for r in runs
            if r.state is RunState.RUNNING and r.expires_at is not None and r.expires_at > now
        )  # fmt: skip
        return JobStatus(
            name=info.name, schedule=spec.get("schedule"), timezone=spec.get("tz"),
            next_due=_next_due(info.name, spec, now), last_run=runs[0] if runs else None,
            live=live, paused_at=info.paused_at, paused_by=info.paused_by,
            paused_reason=info.paused_reason, spec=spec, definition=choice,
        )  # fmt: skip


def _spec(info: JobInfo) -> dict[str, Any]:
    try:
        spec = json.loads(info.spec) if info.spec else {}
    except ValueError:
        return {}
    return spec if isinstance(spec, dict) else {}


def _schedule(info: JobInfo) -> Schedule:
    spec = _spec(info)
    if "cron" not in spec and "every" not in spec:
        raise ConfigurationError(
            f"job {info.name!r} has no registered schedule: run a scheduler of this Relay version "
            "for it once, so the store learns its schedule"
        )
    return make_schedule(cron=spec.get("cron"), every=spec.get("every"), tz=spec.get("tz"))


def _next_due(job: str, spec: dict[str, Any], now: datetime) -> datetime | None:
    try:
        schedule = make_schedule(cron=spec.get("cron"), every=spec.get("every"), tz=spec.get("tz"))
    except ConfigurationError:
        return None
    slot = next(iter(schedule.slots_between(now, now + timedelta(days=400))), None)
    if slot is None:
        return None
    return slot + timedelta(seconds=jitter_delay(job, slot, float(spec.get("jitter") or 0)))


def _backfill_slots(
    schedule: Schedule, start: datetime, end: datetime, now: datetime
) -> list[datetime]:
    if start.tzinfo is None or end.tzinfo is None:
        raise ConfigurationError("backfill start and end need a time zone, e.g. 2026-11-01T00:00Z")
    if end < start:
        raise ConfigurationError(f"backfill end {end} is before its start {start}")
    if end > now:
        raise ConfigurationError(
            f"backfill end {end} is in the future (the store's clock says {now}): slots still "
            "to come run on schedule"
        )
    slots = []
    for slot in schedule.slots_between(start - timedelta(microseconds=1), end):
        slots.append(slot)
        if len(slots) > MAX_BACKFILL:
            raise ConfigurationError(
                f"the range {start} to {end} holds more than {MAX_BACKFILL} slots: backfill it in "
                f"parts of at most {MAX_BACKFILL} runs"
            )
    return slots

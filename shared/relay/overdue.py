"""Which jobs are overdue or failing, decided from a lease store alone, by any process.

For each job the store knows (its schedulers registered it, or it is a stored schedule):

* its **last success** (a slot's or a manual run's), and the **oldest slot not yet succeeded**:
  the job's first slot after that success that has come;
* that slot's **expected success by** time (:func:`relay.expectations.expected_by`): once it has
  passed, the job is **overdue**. With no such slot yet, ``expected_by`` is the next slot's, in the
  future: a Prometheus rule ``time() > expected_by`` then fires however the fleet died;
* how many slots since the last success ended **failed, missed or stale** (skipped for an overlap
  or a pause counts neither way; a slot with no record whose expectation passed counts missed):
  ``alert_after_failures`` of them make the job **failing**.

A paused job, or a stored schedule that is disabled, is ``paused``, never overdue. A job with no
run yet is ``waiting`` (the store cannot tell since when it should have run). A job with
``expect_success_within=False`` and no ``alert_after_failures`` is ``off``.

:func:`read_health` reads the store in O(jobs): its jobs, its clock, its stored schedules, then
the histories of :data:`BATCH` jobs per call (:class:`~relay.contract.ReadsHistory`; one
:meth:`~relay.contract.LeaseBackend.runs` per job on a store without it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from relay.contract import JobHistory, JobInfo, LeaseBackend, reads_history
from relay.errors import ConfigurationError
from relay.expectations import Within, expected_by, next_slot
from relay.runs import RunRecord, RunState
from relay.schedule_store import stores_schedules
from relay.schedules import Schedule, make_schedule
from relay.stored import StoredRow, from_row, schedule_job

__all__ = [
    "ALERTING",
    "BATCH",
    "STATES",
    "JobHealth",
    "decide",
    "overdue_stretches",
    "plans_of",
    "ranked",
    "read_health",
]

BATCH = 1000
"""Jobs whose histories one store call reads."""
DEPTH = 3
"""Runs read per job at least (more when ``alert_after_failures`` asks for more)."""
MAX_DEPTH = 100
"""Runs read per job at most."""
_MAX_UNRECORDED = 100
"""Slots with no record walked per job at most (a fleet dead for long, a fast schedule): the
count of failures stops there."""
STATES = ("overdue", "failing", "ok", "waiting", "paused", "off", "unknown")
"""Every state a job can be in, the ones to look at first first."""
ALERTING = ("overdue", "failing")
"""The states ``relay overdue`` reports (and exits 1 for)."""
_BAD_SKIPS = ("missed", "stale")
_EPS = timedelta(microseconds=1)


@dataclass(frozen=True)
class JobHealth:
    """One job's standing, decided from the store at ``now``."""

    job: str
    state: str
    """One of :data:`STATES`: ``overdue`` when both overdue and failing."""
    now: datetime
    last_success: datetime | None = None
    """When its latest successful run finished (its slot if the store kept no finish time)."""
    last_success_slot: datetime | None = None
    slot: datetime | None = None
    """The oldest slot not yet succeeded that has come, if any."""
    outcome: str | None = None
    """What became of ``slot``: ``failed``, ``missed``, ``stale``, ``running``, ``pending``,
    ``skipped (overlap)``…, or ``no record``."""
    expected_by: datetime | None = None
    """When ``slot`` (or, with none, the next slot) should have succeeded."""
    failures: int = 0
    """Slots since the last success that ended failed, missed or stale (slots with no record
    counted up to a hundred)."""
    alert_after_failures: int | None = None
    overdue: bool = False
    failing: bool = False
    detail: str = ""
    """Why, in words."""

    @property
    def alerting(self) -> bool:
        """Whether the job is overdue or failing."""
        return self.overdue or self.failing

    def to_json(self) -> dict[str, Any]:
        """The fields as JSON values (times as ISO 8601 strings)."""
        return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in asdict(self).items()}


def ranked(found: Sequence[JobHealth]) -> list[JobHealth]:
    """``found`` with overdue jobs first, then failing ones, then the rest; by name within."""
    return sorted(found, key=lambda h: (STATES.index(h.state), h.job))


def decide(
    job: str,
    schedule: Schedule,
    history: JobHistory,
    now: datetime,
    *,
    within: Within = None,
    jitter: float = 0.0,
    alert_after_failures: int | None = None,
    paused: bool = False,
) -> JobHealth:
    """The standing of ``job`` at ``now`` from its ``history`` (a pure function)."""
    won = history.last_success
    # Built once, at the end: 100,000 jobs make 100,000 of them.
    fields: dict[str, Any] = {"alert_after_failures": alert_after_failures}
    if won is not None:
        fields["last_success"] = won.finished_at or won.scheduled_for
        fields["last_success_slot"] = won.scheduled_for
    if paused:
        return JobHealth(job, "paused", now, detail="paused: its slots are skipped", **fields)
    if within is False and alert_after_failures is None:
        return JobHealth(job, "off", now, detail="expect_success_within=False", **fields)
    after = won.scheduled_for if won is not None else None
    since_success = [r for r in history.recent if after is None or r.scheduled_for > after]
    if after is not None:
        anchor = after
    elif history.recent:
        anchor = min(r.scheduled_for for r in history.recent) - _EPS
    else:
        expected = _first_expected(schedule, now, within, jitter)
        return JobHealth(
            job, "waiting", now, expected_by=expected, detail="no run recorded yet", **fields
        )
    first = next_slot(schedule, anchor)
    if first is None or first > now:
        expected = None if first is None else expected_by(schedule, first, within, jitter)
        return JobHealth(
            job, "ok", now, expected_by=expected, detail="every slot that came succeeded", **fields
        )
    by_slot = {r.scheduled_for: r for r in since_success}
    expected = expected_by(schedule, first, within, jitter)
    overdue = expected is not None and now > expected
    failures = _failures(schedule, anchor, now, since_success, by_slot, history, within, jitter)
    failing = alert_after_failures is not None and failures >= alert_after_failures
    outcome = _outcome(by_slot.get(first))
    words = []
    if overdue:
        words.append(f"slot {_iso(first)} ({outcome}) not succeeded by {_iso(expected)}")
    if failing:
        words.append(f"{failures} slots in a row failed, missed or stale")
    return JobHealth(
        job, "overdue" if overdue else "failing" if failing else "ok", now, slot=first,
        outcome=outcome, expected_by=expected, failures=failures, overdue=overdue,
        failing=failing, detail="; ".join(words), **fields,
    )  # fmt: skip


def overdue_stretches(
    schedule: Schedule,
    records: Sequence[RunRecord],
    now: datetime,
    within: Within = None,
    jitter: float = 0.0,
) -> list[tuple[datetime, datetime]]:
    """When the job was overdue, as far as ``records`` (its runs, any order) tell: from the
    expectation of the first slot after each success to the next success's finish (or ``now``).

    Before the first success among ``records`` nothing is known, so nothing is drawn there.
    """
    wins = sorted(
        (r for r in records if r.state is RunState.SUCCEEDED), key=lambda r: r.scheduled_for
    )
    stretches = []
    for won, following in zip(wins, [*wins[1:], None], strict=True):
        first = next_slot(schedule, won.scheduled_for)
        expected = None if first is None else expected_by(schedule, first, within, jitter)
        end = now if following is None else following.finished_at or following.scheduled_for
        if expected is not None and expected < min(end, now):
            stretches.append((expected, min(end, now)))
    return stretches


def _failures(
    schedule: Schedule,
    anchor: datetime,
    now: datetime,
    since_success: list[RunRecord],
    by_slot: Mapping[datetime, RunRecord],
    history: JobHistory,
    within: Within,
    jitter: float,
) -> int:
    bad = sum(1 for r in since_success if _is_bad(r))
    # A slot without a record counts missed once its expectation passed, but only from the
    # oldest record read: older slots may have records this read left out.
    floor = anchor
    if history.recent:
        floor = max(anchor, min(r.scheduled_for for r in history.recent) - _EPS)
    walked = 0
    for slot in schedule.slots_between(floor, now):
        walked += 1
        if walked > _MAX_UNRECORDED:
            break
        if slot in by_slot:
            continue
        limit = expected_by(schedule, slot, None if within is False else within, jitter)
        if limit is not None and now > limit:
            bad += 1
    return bad


def _is_bad(record: RunRecord) -> bool:
    if record.state is RunState.FAILED:
        return True
    return record.state is RunState.SKIPPED and record.reason in _BAD_SKIPS


def _outcome(record: RunRecord | None) -> str:
    if record is None:
        return "no record"
    if record.state is RunState.SKIPPED:
        reason = str(record.reason)
        return reason if reason in _BAD_SKIPS else f"skipped ({reason})"
    return str(record.state.value)


def _first_expected(
    schedule: Schedule, now: datetime, within: Within, jitter: float
) -> datetime | None:
    first = next_slot(schedule, now)
    return None if first is None else expected_by(schedule, first, within, jitter)


def _iso(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat(timespec="seconds")


# -- reading the store ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """What the decision needs of one job, read from its spec or its stored schedule."""

    schedule: Schedule
    within: Within
    jitter: float
    failures: int | None
    paused: bool


def read_health(
    store: LeaseBackend,
    jobs: Sequence[str] | None = None,
    *,
    batch: int = BATCH,
    strict: bool = True,
) -> list[JobHealth]:
    """The standing of every job the store knows (or of ``jobs``), by name.

    Reads only: the store's jobs and clock, its stored schedules, then the histories of
    ``batch`` jobs per call. A job whose schedule the store does not know is ``unknown``; a name
    in ``jobs`` the store does not know raises :class:`ConfigurationError` (``strict=False``:
    is left out).
    """
    now = store.now()
    infos = {info.name: info for info in store.jobs()}
    plans = plans_of(infos.values())
    lease = store
    if stores_schedules(store):
        for row in store.schedule_changes(0):
            if row.definition is None:  # removed: no slot to expect
                plans.pop(row.name, None)
                continue
            plan = _plan_of_stored(lease, row)
            held = infos.get(row.name)
            if plan is not None and held is not None and held.paused:
                plan = replace(plan, paused=True)
            plans[row.name] = plan
    if jobs is not None:
        unknown = sorted(set(jobs) - set(plans))
        if unknown and not strict:
            jobs = [name for name in jobs if name in plans]
        elif unknown:
            raise ConfigurationError(
                f"no job named {', '.join(map(repr, unknown))} in {store.name}; known jobs: "
                f"{', '.join(sorted(plans)) or 'none yet: start a scheduler first'}"
            )
        plans = {name: plans[name] for name in jobs}
    found = [JobHealth(name, "unknown", now, detail="no schedule registered") for name, plan
             in plans.items() if plan is None]  # fmt: skip
    known = {name: plan for name, plan in plans.items() if plan is not None}
    names = sorted(known)
    for start in range(0, len(names), batch):
        part = names[start : start + batch]
        depth = min(MAX_DEPTH, max([DEPTH, *(known[n].failures or 0 for n in part)]))
        for name, history in _histories(store, part, depth).items():
            plan = known[name]
            found.append(
                decide(
                    name, plan.schedule, history, now, within=plan.within, jitter=plan.jitter,
                    alert_after_failures=plan.failures, paused=plan.paused,
                )
            )  # fmt: skip
    return sorted(found, key=lambda h: h.job)


def _histories(store: LeaseBackend, jobs: Sequence[str], depth: int) -> dict[str, JobHistory]:
    if reads_history(store):
        return store.job_history(jobs, depth)
    found = {}
    for job in jobs:  # a store without a batch read: one call per job
        runs = store.runs(job, limit=max(depth, 50))
        slots = [r for r in runs if "@manual:" not in r.id]
        won = next((r for r in runs if r.state is RunState.SUCCEEDED), None)
        found[job] = JobHistory(tuple(slots[:depth]), won)
    return found


def plans_of(infos: Iterable[JobInfo]) -> dict[str, _Plan | None]:
    """What the decision needs of each job (its schedule, expectation, jitter, failure count,
    pause), read from its registered spec (``None``: no usable schedule). Jobs registered with
    the same definition share it (parsed once)."""
    shared: dict[tuple[str | None, bool], _Plan | None] = {}
    plans = {}
    for info in infos:
        key = (info.spec, info.paused)
        if key not in shared:
            shared[key] = _plan_of_spec(info)
        plans[info.name] = shared[key]
    return plans


def _plan_of_spec(info: JobInfo) -> _Plan | None:
    try:
        spec = json.loads(info.spec) if info.spec else {}
        schedule = make_schedule(cron=spec.get("cron"), every=spec.get("every"), tz=spec.get("tz"))
    except (ValueError, TypeError, AttributeError, ConfigurationError):
        return None
    within = spec.get("expect_success_within")
    failures = spec.get("alert_after_failures")
    return _Plan(
        schedule, within if within is False or within is None else float(within),
        float(spec.get("jitter") or 0), failures if isinstance(failures, int) else None,
        info.paused,
    )  # fmt: skip


def _plan_of_stored(store: LeaseBackend, row: StoredRow) -> _Plan | None:
    try:
        schedule = from_row(row)
        job = schedule_job(store, schedule, None)
    except ConfigurationError:
        return None
    return _Plan(
        job.schedule, job.expect_success_within, job.jitter, job.alert_after_failures,
        not schedule.enabled,
    )  # fmt: skip

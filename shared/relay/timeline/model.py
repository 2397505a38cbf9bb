"""What a timeline shows, read from run records alone: a lane per job, a bar per run, and marks.

A lease store keeps one record per run, rewritten by each attempt: its state, its *last* attempt's
number, owner, token and start, how many attempts failed or died (``failures``), and the error of
the last one that failed. Earlier attempts leave no record of their own, so:

* ``attempt - 1`` earlier attempts ended (``attempt`` for a run pending or failed, whose last
  attempt ended too); ``failures`` of them failed or had their runner die; the rest were handed
  over (a scheduler stopped gracefully and released the run).
* A failure leaves its error; a runner that died leaves none, and its expired lease is taken over.
  So a run still running (or failed, or pending) with failures but no error was taken over; with
  an error, it was retried. A success clears the error: for a succeeded run, a takeover and a
  retry look the same ("taken over or retried").
* ``started_at`` is the last attempt's start: its delay after the slot includes the earlier
  attempts. Who ran the earlier attempts, and when, is not recorded.
* Skipped runs carry their reason: ``overlap``, ``missed`` (recorded after downtime), ``stale``,
  and ``paused`` where the store has a control plane.

A lane of a stored schedule (:mod:`relay.timeline.stored`) also carries its task, its state and
its edits, read from the schedule's history: a removed schedule's lane keeps its past runs. A
lane also carries the stretches when its job was overdue (:mod:`relay.overdue`), by the
expectation its job registered: from the first slot after a success's expectation to the next
success.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from relay.contract import LeaseBackend
from relay.errors import ConfigurationError
from relay.overdue import overdue_stretches, plans_of
from relay.runs import RunRecord, RunState, is_manual
from relay.schedule_store import stores_schedules
from relay.timeline.stored import StoredLane, read_stored

__all__ = ["MARKS", "Bar", "Lane", "Mark", "Timeline", "build_timeline", "parse_since", "read"]

MARKS = {
    "takeover": "taken over: the runner stopped heartbeating (died or stalled) and another "
    "instance leased the run again",
    "retry": "retried after an attempt failed with an error",
    "takeover-or-retry": "taken over or retried: an earlier attempt failed or its runner died "
    "(a success clears the error, so the record cannot tell which)",
    "handover": "handed over: a scheduler stopped gracefully and released the run to another",
    "expired": "lease expired: its runner stopped heartbeating and nobody has taken it over yet",
    "manual": "a manual run (relay trigger)",
    "overlap": "skipped: another run of the job held a live lease (overlap='skip')",
    "missed": "missed: no instance ran it at its slot; recorded after downtime (catch_up)",
    "stale": "skipped: not started within stale_after of its slot",
    "paused": "skipped: the job was paused",
}
"""Every kind of mark, and what it means."""

MAX_ROWS = 6
"""Runs of one job that overlap in time are stacked in at most this many rows."""


@dataclass(frozen=True)
class Mark:
    """Something that happened to a run, placed at ``at``."""

    kind: str
    at: datetime
    text: str


@dataclass(frozen=True)
class Bar:
    """One run: from its slot, through its last attempt's start, to its end."""

    record: RunRecord
    began: datetime | None
    """When its last attempt started (``started_at``), if it did."""
    end: datetime
    """When it finished; ``now`` while it is live; its slot when it never ran (skipped)."""
    live: bool
    marks: tuple[Mark, ...]
    row: int = 0

    @property
    def slot(self) -> datetime:
        """The run's slot: where its bar starts."""
        return self.record.scheduled_for

    @property
    def outcome(self) -> str:
        """The state the bar is coloured by."""
        return self.record.state.value

    @property
    def delay(self) -> float | None:
        """Seconds from the slot to the last attempt's start."""
        return None if self.began is None else (self.began - self.slot).total_seconds()


@dataclass(frozen=True)
class Lane:
    """One job's runs, oldest first, in ``rows`` rows."""

    job: str
    bars: tuple[Bar, ...]
    rows: int
    stored: StoredLane | None = None
    """Its stored schedule's task, state and edits; ``None`` for a code-defined job."""
    overdue: tuple[tuple[datetime, datetime], ...] = ()
    """When the job was overdue (:func:`relay.overdue.overdue_stretches`), from-to."""


@dataclass(frozen=True)
class Timeline:
    """Every lane, the time span they cover, and where the records came from."""

    lanes: tuple[Lane, ...]
    start: datetime
    end: datetime
    now: datetime
    source: str
    truncated: bool = False
    """Runs were left out: the store held more than the limit asked for."""


def read(
    backend: LeaseBackend,
    jobs: Sequence[str] = (),
    since: datetime | None = None,
    limit: int = 10_000,
) -> Timeline:
    """Read the latest ``limit`` runs (of each of ``jobs``, or of every job) into a timeline,
    with the store's stored schedules (those of ``jobs``) as lanes and their edits as marks."""
    records: list[RunRecord] = []
    truncated = False
    wanted: Sequence[str | None] = jobs or [None]
    for job in wanted:
        found = backend.runs(job, limit)
        truncated = truncated or len(found) >= limit
        records += found
    if since is not None:
        records = [r for r in records if r.scheduled_for >= since]
    now = backend.now()
    stored = {}
    if stores_schedules(backend):
        # Only the stored schedules with a run drawn or a change in the period (or named): the
        # histories of 100,000 schedules that neither ran nor changed are not read for nothing.
        bars = [bar_of(r, now) for r in records]
        start, end = _span(bars, now)
        ran = {r.job for r in records}
        stored = read_stored(backend, jobs, ran, _edits_from(since, start, end, bool(bars)))
    timeline = build_timeline(
        records, now=now, source=backend.name, truncated=truncated, stored=stored, since=since
    )
    return _with_overdue(timeline, backend, records)


def _with_overdue(
    timeline: Timeline, backend: LeaseBackend, records: Sequence[RunRecord]
) -> Timeline:
    """Each lane with its overdue stretches, by the expectation its job registered."""
    plans = plans_of(backend.jobs())
    by_job: dict[str, list[RunRecord]] = {}
    for record in records:
        by_job.setdefault(record.job, []).append(record)
    lanes = []
    for lane in timeline.lanes:
        plan = plans.get(lane.job)
        if plan is not None and not plan.paused and plan.within is not False:
            found = overdue_stretches(
                plan.schedule, by_job.get(lane.job, []), timeline.now, plan.within, plan.jitter
            )
            lane = replace(lane, overdue=tuple(found))
        lanes.append(lane)
    return replace(timeline, lanes=tuple(lanes))


def build_timeline(
    records: Sequence[RunRecord],
    *,
    now: datetime,
    source: str = "",
    truncated: bool = False,
    stored: Mapping[str, StoredLane] | None = None,
    since: datetime | None = None,
) -> Timeline:
    """Lay records out: a lane per job (by name), bars by slot, overlapping runs in rows.

    Each of ``stored`` is a lane too (with no run yet, or removed with past runs), with its edits
    from ``since``; without ``since``, from the first run's slot less the runs' span, so that a
    schedule added months ago does not squeeze the runs into a corner. Edits left out are counted
    in :attr:`StoredLane.earlier`.
    """
    by_job: dict[str, list[Bar]] = {name: [] for name in stored or {}}
    for record in sorted(records, key=lambda r: (r.scheduled_for, r.id)):
        by_job.setdefault(record.job, []).append(bar_of(record, now))
    lanes = tuple(_stack(job, bars) for job, bars in sorted(by_job.items()))
    bars = [b for lane in lanes for b in lane.bars]
    start, end = _span(bars, now)
    if stored:
        lanes = _with_edits(lanes, stored, _edits_from(since, start, end, bool(bars)))
        edits = [e.at for lane in lanes if lane.stored for e in lane.stored.edits]
        start, end = min([start, *edits]), max([end, *edits])
    return Timeline(lanes, start, max(end, start + timedelta(seconds=1)), now, source, truncated)


def _span(bars: Sequence[Bar], now: datetime) -> tuple[datetime, datetime]:
    """From the first bar's slot to the last bar's end (``now`` when there is none)."""
    start = min((b.slot for b in bars), default=now)
    end = max((max(b.end, b.slot) for b in bars), default=now)
    return start, end


def _edits_from(
    since: datetime | None, start: datetime, end: datetime, any_bars: bool
) -> datetime | None:
    """Where edits start being drawn: ``since``, else the runs' span before the first run."""
    if since is not None or not any_bars:
        return since
    return start - (end - start)


def _with_edits(
    lanes: tuple[Lane, ...], stored: Mapping[str, StoredLane], since: datetime | None
) -> tuple[Lane, ...]:
    """Each stored schedule's lane with its edits from ``since`` (all if ``None``)."""
    out = []
    for lane in lanes:
        info = stored.get(lane.job)
        if info is not None:
            shown = tuple(e for e in info.edits if since is None or e.at >= since)
            earlier = info.earlier + len(info.edits) - len(shown)
            lane = replace(lane, stored=replace(info, edits=shown, earlier=earlier))
        out.append(lane)
    return tuple(out)


def bar_of(record: RunRecord, now: datetime) -> Bar:
    """The bar of one run, with the marks its record supports."""
    live = record.state in (RunState.RUNNING, RunState.PENDING)
    if live:
        end = max(now, record.scheduled_for)
    else:
        end = record.finished_at or record.started_at or record.scheduled_for
        if record.state is RunState.SKIPPED:
            end = record.scheduled_for
    return Bar(record, record.started_at, end, live, _marks(record, now))


def _marks(record: RunRecord, now: datetime) -> tuple[Mark, ...]:
    at = record.started_at or record.scheduled_for
    marks: list[Mark] = []
    if is_manual(record.id):
        marks.append(Mark("manual", record.scheduled_for, MARKS["manual"]))
    if record.state is RunState.SKIPPED:
        reason = record.reason or "skipped"
        marks.append(Mark(reason, record.scheduled_for, MARKS.get(reason, f"skipped: {reason}")))
        return tuple(marks)
    last_ended = record.state in (RunState.PENDING, RunState.FAILED)
    ended = record.attempt - (0 if last_ended else 1)
    last_failed = record.state is RunState.FAILED or record.reason == "failed"
    earlier_failures = max(0, record.failures - (1 if last_failed else 0))
    handovers = max(0, ended - record.failures)
    if handovers:
        times = f" ({handovers} times)" if handovers > 1 else ""
        marks.append(Mark("handover", at, MARKS["handover"] + times))
    if earlier_failures:
        if record.state is RunState.SUCCEEDED:
            kind = "takeover-or-retry"
        else:
            kind = "retry" if record.error else "takeover"
        marks.append(Mark(kind, at, f"{MARKS[kind]} (attempt {record.attempt})"))
    expired = record.expires_at is not None and record.expires_at <= now
    if record.state is RunState.RUNNING and expired:
        assert record.expires_at is not None
        marks.append(Mark("expired", record.expires_at, MARKS["expired"]))
    return tuple(marks)


def _stack(job: str, bars: list[Bar]) -> Lane:
    """Put each bar in the first row free at its slot (a run that overlaps another goes below)."""
    row_ends: list[datetime] = []
    placed: list[Bar] = []
    for bar in bars:
        if bar.outcome == "skipped":  # a skip is a point on the first row: it pushes nothing down
            placed.append(bar)
            continue
        row = next((i for i, end in enumerate(row_ends) if end <= bar.slot), None)
        if row is None and len(row_ends) < MAX_ROWS:
            row = len(row_ends)
            row_ends.append(bar.end)
        elif row is None:
            row = min(range(len(row_ends)), key=row_ends.__getitem__)
        row_ends[row] = max(row_ends[row], bar.end)
        placed.append(Bar(bar.record, bar.began, bar.end, bar.live, bar.marks, row))
    return Lane(job, tuple(placed), max(1, len(row_ends)))


_AGO = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: datetime) -> datetime:
    """``90s``, ``15m``, ``2h``, ``7d`` (that long before ``now``) or an ISO 8601 time (UTC if
    it names no zone)."""
    match = _AGO.match(text)
    if match:
        return now - timedelta(seconds=float(match[1]) * _UNITS[match[2]])
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigurationError(
            f"--since {text!r} is neither a duration (90s, 15m, 2h, 7d) nor an ISO 8601 time "
            "(2026-11-29T21:30:00Z)"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)

"""The console's pages that only read: jobs, one job, runs, one run's story, instances, timeline.

Each reads through :class:`relay.Control` and the lease contract, as ``relay jobs``, ``relay
runs``, ``relay instances`` and ``relay timeline`` do, with the store opened read-only. A store
error is shown on the page. Lists are paged: a page reads its own rows, never the whole store.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from relay import timeline
from relay.console.app import Console
from relay.contract import LeaseBackend, is_lease
from relay.control import Control
from relay.errors import ConfigurationError, RelayError
from relay.health import is_alive
from relay.runs import RunRecord, RunState, is_manual, parse_run_id
from relay.timeline.model import MARKS, bar_of

__all__ = ["RUNS_READ", "Step", "instances", "job", "jobs", "run", "runs", "story", "timeline_page"]

PAGE = 50
"""Jobs (and runs) on one page."""
RUNS_READ = 1000
"""The latest runs a filter of the runs page looks through (the store is read newest first)."""
TIMELINE_RUNS = 2000


def _console(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def _store(control: Control) -> LeaseBackend:
    """The console's store: a lease store (the console opens no other)."""
    store = control.backend
    assert is_lease(store)
    return store


def _number(text: str | None, default: int) -> int:
    try:
        return max(1, int(text or default))
    except ValueError:
        return default


async def jobs(request: Request) -> Response:
    """Every job (a page at a time, by name): schedule, state, pause and why, last outcome, next
    run, the owner of a live run; a stored schedule's note."""
    console = _console(request)
    viewer = console.viewer(request)
    after = request.query_params.get("after", "")
    prefix = request.query_params.get("q", "").strip()
    rows: list[Any] = []
    more, error = False, ""
    try:
        rows, more = await console.read(lambda c: c.jobs_page(after, PAGE, prefix))
    except RelayError as exc:
        error = str(exc)
    return console.render(
        request, "jobs.html", fragment="jobs_table.html", viewer=viewer, rows=rows, more=more,
        after=after, q=prefix, error=error,
    )  # fmt: skip


async def job(request: Request, form: Any = None, status: int = 200) -> Response:
    """One job: its state, next runs, latest runs, and (for writers) pause, resume, trigger,
    backfill; ``form`` carries a refused action's input and errors."""
    console = _console(request)
    viewer = console.viewer(request)
    name = request.path_params["name"]

    def read(control: Control) -> tuple[Any, list[Any], list[RunRecord], str]:
        status = control.job(name)
        try:
            coming = control.next_runs(name, 5)
            note = ""
        except ConfigurationError as exc:
            coming, note = [], str(exc)
        return status, coming, control.runs(name, 20), note

    found: Any = None
    coming: list[Any] = []
    latest: list[RunRecord] = []
    note = error = ""
    try:
        found, coming, latest, note = await console.read(read)
    except RelayError as exc:
        error = str(exc)
    return console.render(
        request, "job.html", fragment="job_state.html" if found else None, viewer=viewer,
        name=name, job=found,
        coming=coming, runs=latest, note=note, error=error, form=form, status=status,
    )  # fmt: skip


async def runs(request: Request) -> Response:
    """The latest runs, filtered by job, state and time (among the latest :data:`RUNS_READ`)."""
    console = _console(request)
    viewer = console.viewer(request)
    query = request.query_params
    job_name = query.get("job", "").strip()
    state = query.get("state", "").strip()
    since, until = query.get("since", "").strip(), query.get("until", "").strip()
    page = _number(query.get("page"), 1)
    # Unfiltered, the pages up to this one are enough (and one more run, for a next page).
    window = RUNS_READ if state or since or until else min(RUNS_READ, page * PAGE + 1)

    def read(control: Control) -> tuple[list[RunRecord], bool]:
        now = _store(control).now()
        start = timeline.parse_since(since, now) if since else None
        end = timeline.parse_since(until, now) if until else None
        found = control.runs(job_name or None, window)
        kept = [
            r for r in found
            if (not state or r.state.value == state)
            and (start is None or r.scheduled_for >= start)
            and (end is None or r.scheduled_for <= end)
        ]  # fmt: skip
        return kept, window == RUNS_READ and len(found) >= RUNS_READ

    shown: list[RunRecord] = []
    more, error = False, ""
    try:
        shown, more = await console.read(read)
    except RelayError as exc:
        error = str(exc)
    total = len(shown)
    shown = shown[(page - 1) * PAGE : page * PAGE]
    return console.render(
        request, "runs.html", fragment="runs_table.html", viewer=viewer, runs=shown,
        total=total, page=page, pages=max(1, -(-total // PAGE)), job=job_name, state=state,
        since=since, until=until, states=[s.value for s in RunState], more=more,
        read=RUNS_READ, filtered=window == RUNS_READ, error=error,
    )  # fmt: skip


@dataclass(frozen=True)
class Step:
    """One line of a run's story."""

    at: datetime | None
    what: str


def story(record: RunRecord, now: datetime) -> list[Step]:
    """What the run's record tells of it, in order: its slot, each lease and attempt, the
    takeovers, handovers and retries the timeline marks, its heartbeat, its end.

    A lease store keeps one record per run (:mod:`relay.timeline.model`): the last attempt's
    owner, token and start, how many attempts failed or died, the last error."""
    steps = [Step(record.scheduled_for, _slot_line(record))]
    if record.state is RunState.SKIPPED:
        reason = record.reason or "skipped"
        return [*steps, Step(record.scheduled_for, MARKS.get(reason, f"skipped: {reason}"))]
    if record.token:
        won = f"won: its latest lease carries fencing token {record.token} (each new lease of "
        steps.append(Step(None, won + "the run gets a higher one; an older token is refused)"))
    for mark in bar_of(record, now).marks:
        if mark.kind != "manual":
            steps.append(Step(mark.at, mark.text))
    if record.failures:
        steps.append(Step(None, f"{record.failures} attempt(s) failed or had their runner die"))
    if record.started_at is not None:
        by = f"by {record.owner or '?'} with token {record.token}"
        steps.append(Step(record.started_at, f"started: attempt {record.attempt} {by}"))
    if record.state is RunState.RUNNING and record.expires_at is not None:
        live = record.expires_at > now
        text = "heartbeating: its lease runs until" if live else "its last heartbeat ran out at"
        steps.append(Step(record.expires_at, f"{text} {record.expires_at.isoformat()}"))
    if record.state is RunState.PENDING:
        steps.append(Step(None, "pending: the next sweep of a live instance leases it"))
    if record.finished_at is not None or record.state in (RunState.SUCCEEDED, RunState.FAILED):
        end = f"finished: {record.state.value}" + (f" ({record.reason})" if record.reason else "")
        steps.append(Step(record.finished_at, end))
    if record.error:
        steps.append(Step(None, f"error of its last failed attempt: {record.error}"))
    return steps


def _slot_line(record: RunRecord) -> str:
    if is_manual(record.id):
        return "triggered by hand (a manual run)"
    version = record.schedule_version
    return "slot due" + (f" (stored schedule version {version})" if version else "")


async def run(request: Request) -> Response:
    """One run: its record and its story."""
    console = _console(request)
    viewer = console.viewer(request)
    run_id = request.path_params["id"]

    def read(control: Control) -> tuple[RunRecord | None, datetime]:
        name, _ = parse_run_id(run_id)
        found = [r for r in control.runs(name, RUNS_READ) if r.id == run_id]
        return (found[0] if found else None), _store(control).now()

    record, steps, error = None, [], ""
    try:
        record, now = await console.read(read)
        if record is None:
            error = f"no run {run_id!r} among the latest {RUNS_READ} runs of its job"
        else:
            steps = story(record, now)
    except RelayError as exc:
        error = str(exc)
    return console.render(
        request, "run.html", fragment="run_story.html" if record else None, viewer=viewer,
        run_id=run_id,
        run=record, steps=steps, error=error,
    )  # fmt: skip


async def instances(request: Request) -> Response:
    """The instances that recorded a heartbeat: role, host, version, last beat, alive, tasks."""
    console = _console(request)
    viewer = console.viewer(request)

    def read(control: Control) -> tuple[list[Any], datetime]:
        store = _store(control)
        return store.instances(), store.now()

    rows: list[Any] = []
    error = ""
    try:
        found, now = await console.read(read)
        rows = [(i, is_alive(i, now)) for i in sorted(found, key=lambda i: i.owner)]
    except RelayError as exc:
        error = str(exc)
    return console.render(
        request, "instances.html", fragment="instances_table.html", viewer=viewer,
        rows=rows, error=error,
    )  # fmt: skip


async def timeline_page(request: Request) -> Response:
    """The same timeline as ``relay timeline``, for the chosen jobs and period, live."""
    console = _console(request)
    viewer = console.viewer(request)
    chosen = [j for j in request.query_params.getlist("job") if j]
    since = request.query_params.get("since", "").strip()

    def read(control: Control) -> tuple[str, str]:
        store = _store(control)
        start = timeline.parse_since(since, store.now()) if since else None
        drawn = timeline.read(store, chosen, start, limit=TIMELINE_RUNS)
        return timeline.render_svg(drawn), timeline.summary(drawn)

    drawing = summary = error = ""
    try:
        drawing, summary = await console.read(read)
    except RelayError as exc:
        error = str(exc)
    return console.render(
        request, "timeline.html", fragment="timeline_drawing.html", viewer=viewer,
        chosen=chosen, since=since, drawing=drawing, summary=summary, error=error,
        style=timeline.STYLE,
    )  # fmt: skip

"""The ``relay`` control commands: ``jobs``, ``next``, ``pause``, ``resume``, ``trigger``,
``backfill``, ``prune``. Each opens the store named by ``--backend`` (default:
``$RELAY_BACKEND``) and calls :class:`relay.Control`."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from relay.cli._format import iso, piped
from relay.cli._options import backend_option, duration, instant, json_option
from relay.cli._stores import control as _control
from relay.control import JobStatus
from relay.definitions import Choice
from relay.overdue import STATES, JobHealth
from relay.runs import RunRecord
from relay.upcoming import HORIZON, NextRun

__all__ = ["COMMANDS"]


@click.command()
@backend_option
@json_option("One JSON object per job, for scripts.")
def jobs(url: str, as_json: bool) -> None:
    """Every job: schedule, time zone, next due, last run, live lease owner and expiry, pause.

    Overdue and failing jobs come first, with their last success and when a success is next
    expected (see `relay overdue`).

    Only reads: the store is opened read-only, and nothing is created.

    \b
    Example:
      relay jobs --backend sqlite:///relay.db --json
    """
    with _control(url, read_only=True) as control:
        statuses = control.jobs()
        health = {h.job: h for h in control.health()}
    statuses = _alerting_first(statuses, health)
    if as_json:
        for status in statuses:
            found = health.get(status.name)
            click.echo(json.dumps({**_job_json(status), "health": found and found.to_json()}))
        return
    Console(width=None if not piped() else 400).print(_jobs_table(statuses, health))


@click.command()
@backend_option
@click.argument("job")
@click.option("--reason", default="", help="Why: shown by `relay jobs`.")
def pause(url: str, job: str, reason: str) -> None:
    """Pause JOB on every instance from its next tick (its slots are recorded skipped).

    \b
    Example:
      relay pause nightly-report --backend sqlite:///relay.db --reason "database upgrade"
    """
    with _control(url) as control:
        done = control.pause(job, reason)
    click.echo(f"paused {job}" if done else f"{job} was already paused")


@click.command()
@backend_option
@click.argument("job")
@click.option(
    "--missed",
    type=click.Choice(["skip", "catch_up"]),
    default="skip",
    show_default=True,
    help="What happens to the slots that passed while paused.",
)
@click.option("--window", default=None, help="With --missed catch_up: how far back, e.g. 1h.")
def resume(url: str, job: str, missed: str, window: str | None) -> None:
    """Resume JOB. Nothing runs because of it unless --missed catch_up.

    \b
    Example:
      relay resume nightly-report --backend sqlite:///relay.db --missed catch_up --window 1h
    """
    span = None if window is None else duration(window, "--window")
    with _control(url) as control:
        back = control.resume(
            job, missed="catch_up" if missed == "catch_up" else "skip", window=span
        )
    click.echo(f"resumed {job}" + (f"; {len(back)} missed runs to catch up" if back else ""))
    for run_id in back:
        click.echo(run_id)


@click.command()
@backend_option
@click.argument("job")
@click.option(
    "--overlap",
    type=click.Choice(["allow", "skip"]),
    default="allow",
    show_default=True,
    help="skip: record it skipped if a run of the job is live.",
)
def trigger(url: str, job: str, overlap: str) -> None:
    """Run JOB now, once: a manual run the instances pick up at their next sweep.

    \b
    Example:
      relay trigger nightly-report --backend sqlite:///relay.db --overlap skip
    """
    with _control(url) as control:
        run = control.trigger(job, overlap="skip" if overlap == "skip" else "allow")
    click.echo(f"{run.id} {run.state.value}" + (f" ({run.reason})" if run.reason else ""))


@click.command()
@backend_option
@click.argument("job")
@click.option("--start", required=True, help="First slot, ISO 8601 with a zone.")
@click.option("--end", required=True, help="Last slot, ISO 8601 with a zone (not in the future).")
@click.option(
    "--overlap",
    type=click.Choice(["allow", "buffer_all"]),
    default="allow",
    show_default=True,
    help="buffer_all: run them one at a time.",
)
def backfill(url: str, job: str, start: str, end: str, overlap: str) -> None:
    """Create the runs of JOB's slots from --start to --end; a slot that ran is not run again.

    \b
    Example:
      relay backfill nightly-report --backend sqlite:///relay.db \\
        --start 2026-11-01T00:00:00Z --end 2026-11-07T00:00:00Z
    """
    first, last = instant(start, "--start"), instant(end, "--end")
    with _control(url) as control:
        created = control.backfill(
            job, first, last, overlap="buffer_all" if overlap == "buffer_all" else "allow"
        )
    new = sum(1 for _, made in created if made)
    click.echo(f"{new} runs created, {len(created) - new} slots already had a run")


@click.command()
@backend_option
@click.option("--older-than", "older_than", required=True, help="Age, e.g. 30d, 12h, 3600.")
def prune(url: str, older_than: str) -> None:
    """Delete finished runs older than --older-than (never live or pending ones, nor the latest).

    \b
    Example:
      relay prune --backend sqlite:///relay.db --older-than 30d
    """
    seconds = duration(older_than, "--older-than")
    with _control(url) as control:
        deleted = control.prune(seconds)
    click.echo(f"pruned {deleted} runs")


@click.command(name="next")
@backend_option
@click.argument("job")
@click.option("--count", default=5, show_default=True, help="How many coming runs.")
@json_option("One JSON object per run, for scripts.")
def next_(url: str, job: str, count: int, as_json: bool) -> None:
    """JOB's next runs: each slot and when it starts after jitter, in UTC and the job's time
    zone, and whether a pause will skip it. Only reads: the store is opened read-only.

    \b
    Example:
      relay next nightly-report --backend sqlite:///relay.db --count 3
    """
    with _control(url, read_only=True) as control:
        runs = control.next_runs(job, count)
    if as_json:
        for run in runs:
            click.echo(json.dumps(_next_json(run)))
        return
    if not runs:
        click.echo(f"{job} has no slot in the next {HORIZON.days} days")
        return
    table = Table(
        title=f"Next runs of {job}" + (" (paused: skipped until resumed)" if runs[0].paused else "")
    )
    for column in ("run", "starts (UTC)", "starts (local)"):
        table.add_column(column, overflow="fold")
    for run in runs:
        table.add_row(run.id, iso(run.starts_at), iso(run.local))
    Console(width=None if not piped() else 400).print(table)


COMMANDS = (jobs, pause, resume, trigger, backfill, prune, next_)
"""The commands ``relay.cli.main`` adds."""


def _alerting_first(statuses: list[JobStatus], health: dict[str, JobHealth]) -> list[JobStatus]:
    rank = {name: (STATES.index(h.state), name) for name, h in health.items()}
    return sorted(statuses, key=lambda s: rank.get(s.name, (len(STATES), s.name)))


def _jobs_table(statuses: list[JobStatus], health: dict[str, JobHealth] | None = None) -> Table:
    table = Table(title="Jobs")
    health = health or {}
    columns = ["job", "health", "last success", "success expected by"]
    columns += ["schedule", "next due", "last run", "live lease", "paused"]
    stored = any(s.stored for s in statuses)
    disagree = any(s.disagreement for s in statuses)
    extra = (["stored schedule"] if stored else []) + (["definitions"] if disagree else [])
    for column in columns + extra:
        table.add_column(column, overflow="fold")
    for s in statuses:
        last = (
            ""
            if s.last_run is None
            else f"{_run_state(s.last_run)} {iso(s.last_run.scheduled_for)}"
        )
        live = ", ".join(f"{r.owner} until {iso(r.expires_at)}" for r in s.live)
        paused = ""
        if s.paused:
            paused = f"since {iso(s.paused_at)} by {s.paused_by}" + (
                f": {s.paused_reason}" if s.paused_reason else ""
            )
        h = health.get(s.name)
        standing = [h.state, iso(h.last_success), iso(h.expected_by)] if h else ["", "", ""]
        row = [s.name, *standing, s.schedule or "?", iso(s.next_due), last, live, paused]
        row += [s.stored or ""] if stored else []
        row += [_disagreement(s.definition)] if disagree else []
        table.add_row(*row)
    return table


def _disagreement(choice: Choice | None) -> str:
    """Which definition decides a job and which others live instances hold (not fired)."""
    if choice is None or not choice.others:
        return ""
    lines = [
        f"deciding: {choice.definition.text} [{choice.definition.hash}] on "
        f"{', '.join(choice.holders)} (Relay {choice.version})"
    ]
    for definition, owners in choice.others:
        lines.append(f"not fired: {definition.text} [{definition.hash}] on {', '.join(owners)}")
    return "\n".join(lines)


def _definition_json(choice: Choice | None) -> dict[str, Any] | None:
    if choice is None:
        return None
    return {
        "hash": choice.definition.hash, "text": choice.definition.text, "owner": choice.owner,
        "version": choice.version, "holders": list(choice.holders),
        "others": [
            {"hash": d.hash, "text": d.text, "owners": list(owners)} for d, owners in choice.others
        ],
    }  # fmt: skip


def _job_json(s: JobStatus) -> dict[str, Any]:
    last = s.last_run
    return {
        "job": s.name, "schedule": s.schedule, "timezone": s.timezone,
        "next_due": iso(s.next_due),
        "last_run": None if last is None else {
            "id": last.id, "slot": iso(last.scheduled_for), "state": last.state.value,
            "reason": last.reason,
        },
        "live": [{"id": r.id, "owner": r.owner, "expires_at": iso(r.expires_at)} for r in s.live],
        "paused": s.paused, "paused_at": iso(s.paused_at), "paused_by": s.paused_by,
        "paused_reason": s.paused_reason, "spec": s.spec, "stored": s.stored,
        "definition": _definition_json(s.definition),
    }  # fmt: skip


def _next_json(run: NextRun) -> dict[str, Any]:
    return {
        "id": run.id, "slot": iso(run.slot), "starts_at": iso(run.starts_at),
        "local": iso(run.local), "timezone": str(run.local.tzinfo), "paused": run.paused,
    }  # fmt: skip


def _run_state(run: RunRecord) -> str:
    return run.state.value + (f" ({run.reason})" if run.reason else "")

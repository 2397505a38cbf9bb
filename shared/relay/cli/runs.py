"""``relay runs``: recent runs of a store, filtered, as a table, JSON or a live feed (read-only)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from time import sleep

import click
from rich.markup import escape
from rich.table import Table

from relay.cli._format import console, iso, plain
from relay.cli._options import Duration, Since, backend_option, count, json_option
from relay.cli._stores import RunsReader, read_runs
from relay.runs import RunRecord, RunState, format_slot
from relay.timeline.model import parse_since

__all__ = ["MAX_LIMIT", "MIN_INTERVAL", "RunFilter", "runs", "runs_table"]

MAX_LIMIT = 100_000
"""Most runs ``--limit`` shows (filters read 100 times as many)."""
MIN_INTERVAL = 0.1
"""Fewest seconds between two reads of ``--follow``."""


@click.command()
@backend_option
@click.option("--job", default=None, help="Only this job's runs (exit 1 if it has none).")
@click.option(
    "--limit",
    default=30,
    show_default=True,
    type=count(1, MAX_LIMIT),
    help="How many runs to show.",
)
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice([s.value for s in RunState]),
    help="Only runs in this state (repeatable).",
)
@click.option(
    "--since",
    type=Since(),
    default=None,
    help="Only runs whose slot is this recent: 2h, 7d or ISO.",
)
@click.option("--follow", is_flag=True, help="Keep printing runs as they appear or change.")
@click.option(
    "--interval",
    default=1.0,
    show_default=True,
    type=Duration(
        MIN_INTERVAL, "each read is a query to the store, and --follow would spin a core"
    ),
    help=f"Seconds between two reads (at least {MIN_INTERVAL:g}).",
)
@json_option("Print JSON, not a table.")
def runs(
    url: str,
    job: str | None,
    limit: int,
    states: tuple[str, ...],
    since: str | None,
    follow: bool,
    interval: float,
    as_json: bool,
) -> None:
    """Recent runs with state, attempt, token, owner, times and errors (read-only).

    ``--state`` and ``--since`` filter the newest runs read (100 times ``--limit`` at most).
    ``--follow`` prints each new or changed run as it is seen (a JSON object per line with
    ``--json``) until interrupted.

    \b
    Example:
      relay runs --backend sqlite:///relay.db --state failed --since 2h
    """
    with read_runs(url) as backend:
        start = None if since is None else parse_since(since, _now(backend))
        filtered = RunFilter(job, limit, frozenset(states), start)
        records = filtered.read(backend)
        if job is not None and not records and not backend.runs(job, 1):
            raise click.ClickException(f"job {job!r} has no runs in {backend.name}")
        if follow:
            _follow(backend, filtered, records, interval, as_json)
        elif as_json:
            click.echo(json.dumps([plain(asdict(r)) for r in records], indent=2))
        else:
            console().print(runs_table(records, title=f"Runs in {backend.name}"))


@dataclass(frozen=True)
class RunFilter:
    """What ``relay runs`` shows: a job's or every job's newest runs, by state and age."""

    job: str | None
    limit: int
    states: frozenset[str]
    since: datetime | None

    def read(self, backend: RunsReader) -> list[RunRecord]:
        """The newest matching runs, newest first."""
        filtering = bool(self.states) or self.since is not None
        found = backend.runs(self.job, self.limit * 100 if filtering else self.limit)
        kept = [
            r
            for r in found
            if (not self.states or r.state.value in self.states)
            and (self.since is None or r.scheduled_for >= self.since)
        ]
        return kept[: self.limit]


def _follow(
    backend: RunsReader,
    filtered: RunFilter,
    first: list[RunRecord],
    interval: float,
    as_json: bool,
) -> None:
    """Print runs oldest first, then every run that appears or changes, until interrupted."""
    seen: dict[str, RunRecord] = {}
    records = first
    try:
        while True:
            for record in reversed(records):
                if seen.get(record.id) != record:
                    seen[record.id] = record
                    click.echo(_run_line(record, as_json))
            sys.stdout.flush()
            sleep(interval)
            records = filtered.read(backend)
    except KeyboardInterrupt:
        return


def _now(backend: object) -> datetime:
    """The store's clock where it has one (a lease store), else this host's."""
    clock = getattr(backend, "now", None)
    return clock() if callable(clock) else datetime.now(timezone.utc)


def _run_line(r: RunRecord, as_json: bool) -> str:
    """One run on one line: JSON, or its slot, job, state, attempt, token, owner and error."""
    if as_json:
        return json.dumps(plain(asdict(r)))
    state = r.state.value + (f" ({r.reason})" if r.reason else "")
    fields = [format_slot(r.scheduled_for), r.job, state, f"attempt {r.attempt}"]
    fields += [f"token {r.token}" if r.token else "", r.owner or "", r.error or ""]
    return "  ".join(field for field in fields if field)


def runs_table(records: list[RunRecord], title: str = "Runs") -> Table:
    """A terminal table of run records, newest first; times are full ISO 8601 with their zone."""
    table = Table(title=title)
    # Which version of a stored schedule each run ran: shown once a run of one is listed.
    versions = any(r.schedule_version is not None for r in records)
    for column in ("job", "slot", "state", "attempt", "token", "owner", "started", "finished"):
        table.add_column(column, no_wrap=column != "owner")
        if column == "job" and versions:
            table.add_column("version", no_wrap=True)
    table.add_column("error", overflow="fold")
    colours = {"succeeded": "green", "failed": "red", "running": "yellow", "skipped": "dim"}
    for r in records:
        state = r.state.value + (f" ({r.reason})" if r.reason else "")
        version = [] if not versions else [f"v{r.schedule_version}" if r.schedule_version else ""]
        table.add_row(
            escape(r.job),
            *version,
            format_slot(r.scheduled_for),
            f"[{colours.get(r.state.value, 'cyan')}]{state}[/]",
            str(r.attempt),
            str(r.token or ""),
            escape(r.owner or ""),
            iso(r.started_at),
            iso(r.finished_at),
            escape(r.error or ""),
        )
    return table

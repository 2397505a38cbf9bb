"""The ``relay`` command: ``relay demo`` (the main job), the read-only views of a lease store
(``relay runs``, ``relay instances``, ``relay health``, a liveness or readiness probe, and
``relay timeline``, an HTML page), and the control commands of :mod:`relay.cli.control`
(``jobs``, ``pause``, ``resume``, ``trigger``, ``backfill``, ``prune``).

Every command that only reads opens the store read-only (:func:`relay.open_backend` with
``read_only=True``): a URL that names no store fails with exit status 1 and creates nothing.
``--backend`` defaults to the ``RELAY_BACKEND`` environment variable.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any, Protocol, runtime_checkable

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from relay.backends import Backend, open_backend
from relay.cli.control import COMMANDS
from relay.cli.doctor import doctor
from relay.cli.schedules import schedules
from relay.contract import LeaseBackend, is_lease
from relay.errors import RelayError
from relay.health import ROLES, InstanceInfo, is_alive
from relay.migrate import migrate
from relay.runs import RunRecord, RunState, format_slot
from relay.timeline.model import parse_since

__all__ = ["instances_table", "main", "runs_table"]

_backend_option = click.option(
    "--backend",
    "url",
    envvar="RELAY_BACKEND",
    show_envvar=True,
    required=True,
    help="Backend URL, e.g. sqlite:///relay.db (a lease backend).",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON, not a table.")


@click.group()
@click.version_option(package_name="relay-scheduler")
def main() -> None:
    """Relay: periodic tasks that any number of instances can run, each run once."""


@main.command()
@click.option("--instances", default=3, show_default=True, help="Instance processes to start.")
@click.option("--duration", default=25.0, show_default=True, help="Seconds to schedule runs for.")
@click.option("--no-kill", is_flag=True, help="Do not kill an instance in the middle of a run.")
def demo(instances: int, duration: float, no_kill: bool) -> None:
    """Race several instances on a temporary SQLite store, kill one mid-run, show the takeover."""
    from relay.demo import run_demo  # the demo pulls in subprocess handling only when asked

    if instances < 2:
        raise click.BadParameter("the demo needs at least 2 instances", param_hint="--instances")
    ok = run_demo(instances=instances, duration=duration, kill=not no_kill, console=Console())
    sys.exit(0 if ok else 1)


@main.command()
@_backend_option
@click.option("--job", default=None, help="Only this job's runs (exit 1 if it has none).")
@click.option("--limit", default=30, show_default=True, help="How many runs to show.")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice([s.value for s in RunState]),
    help="Only runs in this state (repeatable).",
)
@click.option("--since", default=None, help="Only runs whose slot is this recent: 2h, 7d or ISO.")
@click.option("--follow", is_flag=True, help="Keep printing runs as they appear or change.")
@click.option("--interval", default=1.0, show_default=True, help="Seconds between two reads.")
@_json_option
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
    """
    with _read_runs(url) as backend:
        start = None if since is None else parse_since(since, _now(backend))
        filtered = RunFilter(job, limit, frozenset(states), start)
        records = filtered.read(backend)
        if job is not None and not records and not backend.runs(job, 1):
            raise click.ClickException(f"job {job!r} has no runs in {backend.name}")
        if follow:
            _follow(backend, filtered, records, interval, as_json)
        elif as_json:
            click.echo(json.dumps([_plain(asdict(r)) for r in records], indent=2))
        else:
            _console().print(runs_table(records, title=f"Runs in {backend.name}"))


@dataclass(frozen=True)
class RunFilter:
    """What ``relay runs`` shows: a job's or every job's newest runs, by state and age."""

    job: str | None
    limit: int
    states: frozenset[str]
    since: datetime | None

    def read(self, backend: _RunsReader) -> list[RunRecord]:
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
    backend: _RunsReader,
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
            time.sleep(interval)
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
        return json.dumps(_plain(asdict(r)))
    state = r.state.value + (f" ({r.reason})" if r.reason else "")
    fields = [format_slot(r.scheduled_for), r.job, state, f"attempt {r.attempt}"]
    fields += [f"token {r.token}" if r.token else "", r.owner or "", r.error or ""]
    return "  ".join(field for field in fields if field)


@main.command()
@_backend_option
@_json_option
def instances(url: str, as_json: bool) -> None:
    """The schedulers and workers that recorded a heartbeat, and when (read-only)."""
    with _read_only(url) as backend:
        found, now = backend.instances(), backend.now()
        if as_json:
            rows = [{**_plain(asdict(i)), "alive": is_alive(i, now)} for i in found]
            click.echo(json.dumps(rows, indent=2))
        else:
            title = f"Instances in {backend.name} at {_time(now)}"
            _console().print(instances_table(found, now, title=title))


@main.command()
@_backend_option
@click.option(
    "--max-age",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds since the last beat that still count as alive "
    "[default: 3 of the instance's own beat intervals].",
)
@click.option("--role", type=click.Choice(ROLES), default=None, help="Only instances of this role.")
@click.option("--owner", default=None, help="Only the instance with this owner name.")
@click.option("--host", default=None, help='Only instances on this host (e.g. "$HOSTNAME").')
def health(
    url: str, max_age: float | None, role: str | None, owner: str | None, host: str | None
) -> None:
    """Exit 0 if a matching instance beat recently, 1 if none did: a liveness/readiness probe."""
    with _read_only(url) as backend:
        found, now = backend.instances(), backend.now()
    wanted = [
        i
        for i in found
        if (role is None or i.role == role)
        and (owner is None or i.owner == owner)
        and (host is None or i.host == host)
    ]
    alive = [i for i in wanted if is_alive(i, now, max_age)]
    for info in alive or wanted:
        limit = max_age if max_age is not None else 3 * info.interval
        verdict = "alive" if info in alive else "late"
        click.echo(
            f"{verdict}: {info.role} {info.owner} (pid {info.pid} on {info.host}) beat "
            f"{_age(info, now):.1f}s ago (max age {limit:g}s)"
        )
    if not alive:
        what = " ".join(
            f"{k}={v}" for k, v in (("role", role), ("owner", owner), ("host", host)) if v
        )
        click.echo(
            f"unhealthy: no instance{' with ' + what if what else ''} beat within its max age "
            f"in {backend.name}" + ("" if wanted else " (none recorded)")
        )
        sys.exit(1)


@main.command()
@_backend_option
@click.option("--job", "jobs", multiple=True, help="Only this job's runs (repeat for several).")
@click.option("--since", default=None, help="Only runs from then on: 90s, 15m, 2h, 7d or ISO 8601.")
@click.option("--limit", default=10_000, show_default=True, help="Latest runs to read per --job.")
@click.option(
    "--html", "out", required=True, type=click.Path(dir_okay=False), help="The page to write."
)
def timeline(url: str, jobs: tuple[str, ...], since: str | None, limit: int, out: str) -> None:
    """Write a timeline of runs to one self-contained HTML page (reads the store only)."""
    from relay import timeline as tl  # drawing is only needed here

    with _read_only(url) as backend:
        start = None if since is None else tl.parse_since(since, backend.now())
        drawn = tl.read(backend, jobs, start, limit)
    tl.write_html(drawn, out, title=f"Relay timeline: {backend.name}")
    click.echo(f"wrote {out}: {tl.summary(drawn)}")


def runs_table(records: list[RunRecord], title: str = "Runs") -> Table:
    """A terminal table of run records, newest first; times are full ISO 8601 with their zone."""
    table = Table(title=title)
    for column in ("job", "slot", "state", "attempt", "token", "owner", "started", "finished"):
        table.add_column(column, no_wrap=column != "owner")
    table.add_column("error", overflow="fold")
    colours = {"succeeded": "green", "failed": "red", "running": "yellow", "skipped": "dim"}
    for r in records:
        state = r.state.value + (f" ({r.reason})" if r.reason else "")
        table.add_row(
            escape(r.job),
            format_slot(r.scheduled_for),
            f"[{colours.get(r.state.value, 'cyan')}]{state}[/]",
            str(r.attempt),
            str(r.token or ""),
            escape(r.owner or ""),
            _time(r.started_at),
            _time(r.finished_at),
            escape(r.error or ""),
        )
    return table


def instances_table(found: list[InstanceInfo], now: datetime, title: str = "Instances") -> Table:
    """A terminal table of instances: who, where, since when, and how long since its last beat."""
    table = Table(title=title)
    for column in ("role", "owner", "host", "pid", "version", "started", "last beat", "age", ""):
        table.add_column(column, no_wrap=True)
    for i in found:
        alive = is_alive(i, now)
        table.add_row(
            i.role, escape(i.owner), escape(i.host), str(i.pid), i.version, _time(i.started_at),
            _time(i.beat_at), f"{_age(i, now):.1f}s",
            "[green]alive[/]" if alive else f"[red]late[/] (beats every {i.interval:g}s)",
        )  # fmt: skip
    return table


@runtime_checkable
class _RunsReader(Protocol):
    """What ``relay runs`` reads: a lease store, or RabbitMQ consumer mode's outcomes stream."""

    @property
    def name(self) -> str: ...

    def runs(self, job: str | None = None, limit: int = 50) -> list[RunRecord]: ...

    def close(self) -> None: ...


@contextmanager
def _opened(url: str) -> Iterator[Backend]:
    """The store a URL names, opened read-only and closed after; a Relay error exits with 1."""
    try:
        backend = open_backend(url, read_only=True)
    except RelayError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        yield backend
    except RelayError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        backend.close()


@contextmanager
def _read_runs(url: str) -> Iterator[_RunsReader]:
    """Like :func:`_read_only`, also for a claim backend that records outcomes it can read."""
    with _opened(url) as backend:
        if not isinstance(backend, _RunsReader):
            raise click.ClickException(f"{backend.name} is a claim backend: it records no runs")
        yield backend


@contextmanager
def _read_only(url: str) -> Iterator[LeaseBackend]:
    """The lease store a URL names, opened read-only; any Relay error exits with status 1."""
    with _opened(url) as backend:
        if not is_lease(backend):  # open_backend refuses them; this tells mypy
            raise click.ClickException(f"{backend.name} is a claim backend: it records no runs")
        yield backend


def _console() -> Console:
    """A console that truncates nothing when its output goes to a pipe or a file."""
    console = Console()
    return console if console.is_terminal else Console(width=100_000)


def _time(value: datetime | None) -> str:
    return "" if value is None else value.isoformat(timespec="milliseconds")


def _age(info: InstanceInfo, now: datetime) -> float:
    return 0.0 if info.beat_at is None else (now - info.beat_at).total_seconds()


def _plain(fields: dict[str, Any]) -> dict[str, Any]:
    """A record's fields as JSON values: times as ISO 8601 with their zone, enums as strings."""
    return {
        key: value.isoformat() if isinstance(value, datetime) else getattr(value, "value", value)
        for key, value in fields.items()
    }


for _command in (*COMMANDS, doctor):
    main.add_command(_command)
main.add_command(schedules)


@click.command("migrate")
@_backend_option
def migrate_command(url: str) -> None:
    """Create or upgrade Relay's schema in the store (run it as the schema's owner).

    Instances whose role only has the grants in docs/security.md then start without DDL. Exit
    status 1, with the reason, when the schema cannot be changed by this user.
    """
    try:
        click.echo(migrate(url))
    except RelayError as exc:
        raise click.ClickException(str(exc)) from None


main.add_command(migrate_command)

"""``relay instances`` and ``relay health``: the heartbeats instances recorded (read-only); the
second is a liveness or readiness probe."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from datetime import datetime

import click
from rich.markup import escape
from rich.table import Table

from relay.cli._format import console, iso, plain
from relay.cli._options import backend_option, json_option
from relay.cli._stores import read_only
from relay.health import ROLES, InstanceInfo, is_alive, is_healthy
from relay.overdue import ranked, read_health

__all__ = ["health", "instances", "instances_table"]


@click.command()
@backend_option
@json_option("Print JSON, not a table.")
def instances(url: str, as_json: bool) -> None:
    """The schedulers and workers that recorded a heartbeat, and when (read-only).

    \b
    Example:
      relay instances --backend redis://localhost:6379/0 --json
    """
    with read_only(url) as backend:
        found, now = backend.instances(), backend.now()
        if as_json:
            rows = [
                {**plain(asdict(i)), "alive": is_alive(i, now), "healthy": is_healthy(i, now)}
                for i in found
            ]
            click.echo(json.dumps(rows, indent=2))
        else:
            title = f"Instances in {backend.name} at {iso(now)}"
            console().print(instances_table(found, now, title=title))


@click.command()
@backend_option
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
@click.option(
    "--jobs",
    "check_jobs",
    is_flag=True,
    help="Also exit 1 if a job is overdue or failing (see `relay overdue`).",
)
def health(
    url: str,
    max_age: float | None,
    role: str | None,
    owner: str | None,
    host: str | None,
    check_jobs: bool = False,
) -> None:
    """Exit 0 if a matching instance beat recently and works, 1 if none: a liveness/readiness probe.

    An instance that beats but recorded a problem (its steps failed for longer than a lease, or
    its store needs a newer Relay) counts as unhealthy, whatever --max-age says.

    With --jobs, also exit 1 if a job is overdue or failing (`relay overdue` lists them).

    \b
    Example:
      relay health --backend redis://localhost:6379/0 --role worker --host "$HOSTNAME"
    """
    with read_only(url) as backend:
        found, now = backend.instances(), backend.now()
        alerting = [h for h in read_health(backend) if h.alerting] if check_jobs else []
    for job in ranked(alerting):
        click.echo(f"{job.state}: job {job.job}: {job.detail}")
    wanted = [
        i
        for i in found
        if (role is None or i.role == role)
        and (owner is None or i.owner == owner)
        and (host is None or i.host == host)
    ]
    alive = [i for i in wanted if is_healthy(i, now, max_age)]
    for info in alive or wanted:
        limit = max_age if max_age is not None else 3 * info.interval
        verdict = (
            "alive"
            if info in alive
            else "failing"
            if info.problem is not None and is_alive(info, now, max_age)
            else "late"
        )
        click.echo(
            f"{verdict}: {info.role} {info.owner} (Relay {info.version}, pid {info.pid} on "
            f"{info.host}) beat {_age(info, now):.1f}s ago (max age {limit:g}s)"
            + ("" if info.problem is None else f": {info.problem}")
        )
    if alerting and alive:
        click.echo(f"unhealthy: {len(alerting)} job(s) overdue or failing in {backend.name}")
        sys.exit(1)
    if not alive:
        what = " ".join(
            f"{k}={v}" for k, v in (("role", role), ("owner", owner), ("host", host)) if v
        )
        click.echo(
            f"unhealthy: no instance{' with ' + what if what else ''} beat within its max age "
            f"and works in {backend.name}" + ("" if wanted else " (none recorded)")
        )
        sys.exit(1)


def instances_table(found: list[InstanceInfo], now: datetime, title: str = "Instances") -> Table:
    """A terminal table of instances: who, where, since when, and how long since its last beat."""
    table = Table(title=title)
    for column in ("role", "owner", "host", "pid", "version", "started", "last beat", "age", ""):
        table.add_column(column, no_wrap=True)
    for i in found:
        alive = is_healthy(i, now)
        table.add_row(
            i.role, escape(i.owner), escape(i.host), str(i.pid), i.version, iso(i.started_at),
            iso(i.beat_at), f"{_age(i, now):.1f}s",
            "[green]alive[/]" if alive
            else f"[red]failing[/]: {escape(i.problem)}" if i.problem is not None
            else f"[red]late[/] (beats every {i.interval:g}s)",
        )  # fmt: skip
    return table


def _age(info: InstanceInfo, now: datetime) -> float:
    return 0.0 if info.beat_at is None else (now - info.beat_at).total_seconds()

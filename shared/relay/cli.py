"""The ``relay`` command: ``relay demo`` (the main job), ``relay runs`` (status of a store) and
the control commands of :mod:`relay.cli_control` (``jobs``, ``pause``, ``resume``, ``trigger``,
``backfill``, ``prune``)."""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table

from relay.backends import open_backend
from relay.cli_control import COMMANDS
from relay.contract import is_lease
from relay.errors import RelayError
from relay.runs import RunRecord, format_slot

__all__ = ["main", "runs_table"]


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
@click.option("--backend", "url", required=True, help="Backend URL, e.g. sqlite:///relay.db")
@click.option("--job", default=None, help="Only this job's runs.")
@click.option("--limit", default=30, show_default=True, help="How many runs to show.")
def runs(url: str, job: str | None, limit: int) -> None:
    """Recent runs with state, attempt, token, owner and times (lease backends)."""
    try:
        backend = open_backend(url)
    except RelayError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        if not is_lease(backend):
            raise click.ClickException(
                f"{backend.name} is a claim backend: it records only who won, not runs"
            )
        Console().print(runs_table(backend.runs(job, limit), title=f"Runs in {backend.name}"))
    except RelayError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        backend.close()


def runs_table(records: list[RunRecord], title: str = "Runs") -> Table:
    """A terminal table of run records, newest first."""
    table = Table(title=title)
    for column in ("job", "slot", "state", "attempt", "token", "owner", "started", "finished"):
        table.add_column(column)
    colours = {"succeeded": "green", "failed": "red", "running": "yellow", "skipped": "dim"}
    for r in records:
        state = r.state.value + (f" ({r.reason})" if r.reason else "")
        table.add_row(
            r.job,
            format_slot(r.scheduled_for),
            f"[{colours.get(r.state.value, 'cyan')}]{state}[/]",
            str(r.attempt),
            str(r.token or ""),
            r.owner or "",
            _time(r.started_at),
            _time(r.finished_at),
        )
    return table


def _time(value: object) -> str:
    return "" if value is None else f"{value:%H:%M:%S.%f}"[:-3]


for _command in COMMANDS:
    main.add_command(_command)


if __name__ == "__main__":
    main()

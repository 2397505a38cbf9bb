"""``relay overdue``: the jobs that are overdue or failing, decided from the store alone (a dead
man's switch to run from another host); ``relay alert-rules --prometheus``: alerting rules on the
gauges ``relay.metrics`` exports from the store."""

from __future__ import annotations

import json
import sys

import click
from rich.markup import escape
from rich.table import Table

from relay.cli._format import console, iso
from relay.cli._options import backend_option, json_option
from relay.cli._stores import read_only
from relay.overdue import JobHealth, ranked, read_health
from relay.prometheus_rules import prometheus_rules

__all__ = ["alert_rules", "health_table", "overdue"]


@click.command()
@backend_option
@json_option("Print a JSON list, for scripts.")
@click.option("--all", "every", is_flag=True, help="List every job, not only the alerting ones.")
@click.option("--job", "jobs", multiple=True, help="Only this job (repeat for several).")
def overdue(url: str, as_json: bool, every: bool, jobs: tuple[str, ...]) -> None:
    """List the overdue and failing jobs; exit 1 if there is one, 0 if none.

    A job is overdue when its oldest slot not yet succeeded has passed its expect_success_within;
    failing when its alert_after_failures slots in a row failed, were missed or went stale.
    Decided from the store alone: run it from a cron or a Kubernetes CronJob on another host,
    and it still reports when every instance is down. Only reads.

    \b
    Example:
      relay overdue --backend postgresql://relay@db/relay --json
    """
    with read_only(url) as backend:
        found = ranked(read_health(backend, list(jobs) or None))
    alerting = [h for h in found if h.alerting]
    shown = found if every else alerting
    if as_json:
        click.echo(json.dumps([h.to_json() for h in shown], indent=2))
    elif shown:
        console().print(health_table(shown, "Jobs" if every else "Overdue and failing jobs"))
    else:
        click.echo(f"no job is overdue or failing ({len(found)} checked)")
    if alerting:
        sys.exit(1)


@click.command(name="alert-rules")
@click.option("--prometheus", is_flag=True, required=True, help="Prometheus alerting rules (YAML).")
@click.option("--namespace", default="relay", show_default=True, help="The metrics' prefix.")
@click.option(
    "--for", "for_", default="5m", show_default=True, help="How long a rule holds before firing."
)
def alert_rules(prometheus: bool, namespace: str, for_: str) -> None:
    """Print alerting rules on the gauges `python -m relay.metrics --backend URL` exports.

    The overdue rule compares time() with the expected-success time last exported, so it fires
    even when no instance is left to export anything.

    \b
    Example:
      relay alert-rules --prometheus > /etc/prometheus/rules/relay.yml
    """
    click.echo(prometheus_rules(namespace, for_), nl=False)


def health_table(found: list[JobHealth], title: str) -> Table:
    """A terminal table of jobs' standing: state, slot, what became of it, since when."""
    table = Table(title=title)
    for column in ("job", "state", "slot", "outcome", "expected by", "last success", "failed"):
        table.add_column(column, overflow="fold")
    for h in found:
        colour = {"overdue": "red", "failing": "yellow", "ok": "green"}.get(h.state, "")
        state = f"[{colour}]{h.state}[/]" if colour else h.state
        table.add_row(
            escape(h.job), state, iso(h.slot), h.outcome or "", iso(h.expected_by),
            iso(h.last_success), str(h.failures) if h.failures else "",
        )  # fmt: skip
    return table

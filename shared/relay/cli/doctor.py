"""``relay doctor``: what the store, as configured, can cost when something fails (read-only)."""

from __future__ import annotations

import json
import os
import sys

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from relay.backends import capability_of
from relay.backends._url import BackendURL
from relay.cli._options import backend_option, json_option
from relay.cli._stores import control
from relay.doctor import DoctorReport, claim_store_refusal

__all__ = ["doctor", "doctor_table"]

_COLOURS = {"nothing": "green", "run twice": "red", "unknown": "yellow"}


@click.command()
@backend_option
@json_option("Print the report as JSON, for scripts.")
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 1 if some failure may run a run twice, or cannot be judged.",
)
def doctor(url: str, as_json: bool, strict: bool) -> None:
    """What this store, as configured, can cost when a Relay process crashes, the store restarts
    or loses power, a replica is promoted, or the network splits.

    Reads the store's own settings (journal mode, fsync, replicas, persistence...) and creates
    nothing. Exit 0, or with --strict 1 when a failure may run a run twice.

    \b
    Example:
      relay doctor --backend postgresql://relay@db.example/app --strict
    """
    _refuse_claim_store(url)
    with control(url, read_only=True) as opened:
        report = opened.doctor()
    if as_json:
        click.echo(json.dumps(report.as_json(), indent=2))
    else:
        _print(report)
    sys.exit(1 if strict and not report.passes_strict else 0)


def doctor_table(report: DoctorReport) -> Table:
    """The findings as a terminal table: failure, cost, why, and what to change."""
    table = Table(title=f"What can fail: {escape(report.store)}", expand=True)
    table.add_column("failure", no_wrap=True)
    table.add_column("cost", no_wrap=True)
    table.add_column("why", overflow="fold", ratio=3)
    table.add_column("what to change", overflow="fold", ratio=2)
    for f in report.findings:
        cost = f"[{_COLOURS[f.cost]}]{f.cost}[/]"
        table.add_row(f.failure, cost, escape(f.why), escape(f.fix))
    return table


def _print(report: DoctorReport) -> None:
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=140)  # rather than 80: the reasons are sentences
    console.print(doctor_table(report))
    shown = "  ".join(f"{k}={_shown(v)}" for k, v in report.facts.items() if k != "store")
    console.print(f"settings read: {escape(shown)}", highlight=False)
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
    twice = [f.failure for f in report.findings if f.cost == "run twice"]
    if twice:
        console.print(f"[red]A run may run twice after: {', '.join(twice)}.[/]")
    if report.unknown:
        console.print(f"[yellow]Cannot tell what these cost: {', '.join(report.unknown)}.[/]")
    if report.passes_strict:
        console.print("[green]No failure listed can run a run twice.[/]")


def _shown(value: object) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, list):
        return ",".join(map(str, value)) or "none"
    return repr(value) if value == "" else str(value)


def _refuse_claim_store(url: str) -> None:
    """A claim URL is refused before it is opened: opening one may create its queue or stream."""
    if capability_of(url) != "lease":
        raise click.ClickException(claim_store_refusal(BackendURL(url).redacted()))

"""``relay doctor``: what the store, as configured, can cost when something fails (read-only)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from relay.cli._options import backend_option, json_option
from relay.doctor import DoctorReport, diagnose_url
from relay.errors import RelayError

__all__ = ["doctor", "doctor_table"]

_COLOURS = {"nothing": "green", "run twice": "red", "unknown": "yellow"}


class _JsonErrors(click.Command):
    """A command that, given ``--json``, prints its errors as JSON too: ``{"error": message,
    "exit_code": status}`` on standard output, then exits with that status (2 for usage, else
    1), so a script reads JSON on every path."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:  # fmt: skip
        as_json = "--json" in args  # before parsing, which consumes args
        try:
            ctx = super().make_context(info_name, args, parent, **extra)
        except click.ClickException as exc:
            if as_json:
                _exit_json(exc)
            raise
        ctx.meta["json_errors"] = as_json
        return ctx

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, RelayError) as exc:
            if not ctx.meta.get("json_errors"):
                raise
            _exit_json(exc if isinstance(exc, click.ClickException) else _refusal(exc))


def _refusal(exc: RelayError) -> click.ClickException:
    return click.ClickException(str(exc))


def _exit_json(exc: click.ClickException) -> None:
    click.echo(json.dumps({"error": exc.format_message(), "exit_code": exc.exit_code}))
    raise click.exceptions.Exit(exc.exit_code)


@click.command(cls=_JsonErrors)
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
    nothing: a store with no Relay data yet (before the first deploy) is judged on its server's
    settings. Exit 0, or with --strict 1 when a failure may run a run twice. With --json, errors
    are JSON too: {"error": ..., "exit_code": ...}.

    \b
    Example:
      relay doctor --backend postgresql://relay@db.example/app --strict
    """
    report = diagnose_url(url)
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
    if not report.relay_data:
        console.print(
            f"[yellow]No Relay data found in {escape(report.store)} yet:[/] these are the server's "
            "settings (and those Relay will create its store with); nothing was created to read "
            "them.",
            highlight=False,
        )


def _shown(value: object) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, list):
        return ",".join(map(str, value)) or "none"
    return repr(value) if value == "" else str(value)

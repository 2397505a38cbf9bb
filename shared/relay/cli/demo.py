"""``relay demo``: several instances race on a temporary SQLite store; one is killed mid-run."""

from __future__ import annotations

import sys

import click
from rich.console import Console

from relay.cli._options import Duration, count

__all__ = ["demo"]


@click.command()
@click.option(
    "--instances",
    default=3,
    show_default=True,
    type=count(2, 16),
    help="Instance processes to start (2 to 16).",
)
@click.option(
    "--duration",
    default=25.0,
    show_default=True,
    type=Duration(1.0, "no run would start"),
    help="Seconds to schedule runs for.",
)
@click.option("--no-kill", is_flag=True, help="Do not kill an instance in the middle of a run.")
def demo(instances: int, duration: float, no_kill: bool) -> None:
    """Race several instances on a temporary SQLite store, kill one mid-run, show the takeover.

    \b
    Example:
      relay demo --instances 3 --duration 25
    """
    from relay.demo import run_demo  # the demo pulls in subprocess handling only when asked

    ok = run_demo(instances=instances, duration=duration, kill=not no_kill, console=Console())
    sys.exit(0 if ok else 1)

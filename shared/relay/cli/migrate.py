"""``relay migrate``: create or upgrade Relay's schema in the store, as the schema's owner; with
``--plan``, say what it would change (read-only); with ``--contract``, remove what only older
Relays needed once none runs (see docs/upgrade.md)."""

from __future__ import annotations

import click

from relay.cli._options import backend_option
from relay.migrate import contract, migrate, plan

__all__ = ["migrate_command"]


@click.command("migrate")
@backend_option
@click.option(
    "--plan",
    "show_plan",
    is_flag=True,
    help="Only say what a migration would change and whether the live instances' Relays can go "
    "on beside it; change nothing.",
)
@click.option(
    "--contract",
    "contracting",
    is_flag=True,
    help="Remove what only Relays older than this one used, and make the store need this Relay "
    "or newer; refused while a live instance runs an older Relay.",
)
def migrate_command(url: str, show_plan: bool, contracting: bool) -> None:
    """Create or upgrade Relay's schema in the store (run it as the schema's owner).

    Migrations only add: instances of the previous release keep working beside the new ones.
    Instances whose role only has the grants in docs/security.md then start without DDL. Exit
    status 1, with the reason, when the schema cannot be changed by this user, or when
    --contract finds a live instance of an older Relay.

    \b
    Example:
      relay migrate --backend postgresql://owner@db.example/app --plan
      relay migrate --backend postgresql://owner@db.example/app
      relay migrate --backend postgresql://owner@db.example/app --contract
    """
    if show_plan and contracting:
        raise click.UsageError("--plan and --contract go one at a time: --plan only reads")
    click.echo(plan(url) if show_plan else contract(url) if contracting else migrate(url))

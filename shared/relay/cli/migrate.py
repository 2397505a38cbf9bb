"""``relay migrate``: create or upgrade Relay's schema in the store, as the schema's owner."""

from __future__ import annotations

import click

from relay.cli._options import backend_option
from relay.migrate import migrate

__all__ = ["migrate_command"]


@click.command("migrate")
@backend_option
def migrate_command(url: str) -> None:
    """Create or upgrade Relay's schema in the store (run it as the schema's owner).

    Instances whose role only has the grants in docs/security.md then start without DDL. Exit
    status 1, with the reason, when the schema cannot be changed by this user.

    \b
    Example:
      relay migrate --backend postgresql://owner@db.example/app
    """
    click.echo(migrate(url))

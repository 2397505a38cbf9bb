"""The ``relay`` command, a module per command group: ``relay demo`` (:mod:`.demo`); the
read-only views of a lease store, ``relay runs`` (:mod:`.runs`), ``relay instances`` and
``relay health`` (:mod:`.instances`), ``relay timeline`` (:mod:`.timeline`); the control commands
``jobs``, ``next``, ``pause``, ``resume``, ``trigger``, ``backfill``, ``prune`` (:mod:`.control`);
``relay schedules`` (:mod:`.schedules`); ``relay doctor`` (:mod:`.doctor`); ``relay migrate``
(:mod:`.migrate`); ``relay console``, the web console (:mod:`.console`); ``relay overdue`` and
``relay alert-rules`` (:mod:`.overdue`).

Every command takes the one ``--backend`` option (default: ``RELAY_BACKEND``) and leaves a Relay
error through the one boundary, :class:`~relay.cli._options.RelayGroup`: its message and exit
status 1. Every command that only reads opens the store read-only (:func:`relay.open_backend`
with ``read_only=True``): a URL that names no store fails with exit status 1 and creates nothing.
"""

from __future__ import annotations

import click

from relay.cli import (
    console,
    control,
    demo,
    doctor,
    instances,
    migrate,
    overdue,
    runs,
    schedules,
    timeline,
)
from relay.cli._options import RelayGroup
from relay.cli.instances import instances_table
from relay.cli.runs import runs_table

__all__ = ["instances_table", "main", "runs_table"]


@click.group(cls=RelayGroup)
@click.version_option(package_name="relay-scheduler")
def main() -> None:
    """Relay: periodic tasks that any number of instances can run, each run once.

    \b
    Example:
      relay runs --backend sqlite:///relay.db
    """


for _command in (
    demo.demo,
    runs.runs,
    instances.instances,
    instances.health,
    timeline.timeline,
    *control.COMMANDS,
    doctor.doctor,
    schedules.schedules,
    migrate.migrate_command,
    console.console,
    overdue.overdue,
    overdue.alert_rules,
):
    main.add_command(_command)

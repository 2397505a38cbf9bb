"""``relay-dramatiq APP_MODULE``: the scheduler process for Dramatiq's periodic actors and
stored schedules."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

import click
import dramatiq
from dramatiq.errors import ActorNotFound

from relay.errors import RelayError
from relay_dramatiq._periodic import periodic_actors
from relay_dramatiq._scheduler import Scheduler
from relay_dramatiq._stored import schedulable_actors

__all__ = ["main"]


@click.command()
@click.argument("app_module")
@click.option("--tick", type=float, default=None, help="Seconds between ticks (default: 1).")
@click.option(
    "--schedulable",
    "schedulable",
    multiple=True,
    metavar="ACTOR",
    help="Let stored schedules run this actor (by name, on the app's broker); repeat for more. "
    "Actors marked @relay_dramatiq.schedulable, or named by the broker's RelayMiddleware "
    "(schedulable=; Django: RELAY['SCHEDULABLE_TASKS']), are allowed anyway.",
)
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
)
def main(app_module: str, tick: float | None, schedulable: tuple[str, ...], log_level: str) -> None:
    """Import APP_MODULE, then enqueue each run of its periodic actors and of the stored
    schedules of its schedulable actors that this process wins.

    Run as many as you like, anywhere: each run is enqueued once. SIGTERM or SIGINT stops it.
    """
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(process)d %(levelname)s %(name)s %(message)s"
    )
    sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(app_module)
        allowed = schedulable_actors(dramatiq.get_broker()) + [_actor(n) for n in schedulable]
        scheduler = Scheduler(periodic_actors(), schedulable=allowed, tick=tick)
        # Waits for a store that is down; a periodic actor with a stored schedule's name
        # refuses to start.
        scheduler.run()
    except ImportError as exc:
        raise click.ClickException(f"cannot import {app_module!r}: {exc}") from exc
    except RelayError as exc:
        raise click.ClickException(f"{app_module}: {exc}") from exc


def _actor(name: str) -> dramatiq.Actor[Any, Any]:
    try:
        return dramatiq.get_broker().get_actor(name)
    except ActorNotFound:
        raise click.ClickException(
            f"--schedulable {name}: the app's broker has no actor of that name"
        ) from None


if __name__ == "__main__":
    main()

"""``relay-dramatiq APP_MODULE``: the scheduler process for Dramatiq's periodic actors."""

from __future__ import annotations

import importlib
import logging
import os
import sys

import click

from relay.errors import RelayError
from relay_dramatiq._periodic import periodic_actors
from relay_dramatiq._scheduler import Scheduler

__all__ = ["main"]


@click.command()
@click.argument("app_module")
@click.option("--tick", type=float, default=None, help="Seconds between ticks (default: 1).")
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
)
def main(app_module: str, tick: float | None, log_level: str) -> None:
    """Import APP_MODULE, then enqueue each run of its periodic actors that this process wins.

    Run as many as you like, anywhere: each run is enqueued once. SIGTERM or SIGINT stops it.
    """
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(process)d %(levelname)s %(name)s %(message)s"
    )
    sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(app_module)
        scheduler = Scheduler(periodic_actors(), tick=tick)
    except ImportError as exc:
        raise click.ClickException(f"cannot import {app_module!r}: {exc}") from exc
    except RelayError as exc:
        raise click.ClickException(f"{app_module}: {exc}") from exc
    scheduler.run()


if __name__ == "__main__":
    main()

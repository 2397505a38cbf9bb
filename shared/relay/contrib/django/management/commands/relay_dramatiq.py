"""``manage.py relay_dramatiq [MODULE ...]``: the Dramatiq scheduler, set up for Django.

Django is set up by ``manage.py``; the command then imports the modules that declare periodic
actors and the broker (named on the command line, or else each installed app's ``tasks`` module,
or those ``DRAMATIQ_AUTODISCOVER_MODULES`` names, as django_dramatiq finds them) and runs
:class:`relay_dramatiq.Scheduler` until SIGTERM or SIGINT. Run as many as you like.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.module_loading import module_has_submodule

from relay.errors import RelayError


class Command(BaseCommand):
    """Decide the runs of the project's periodic Dramatiq actors and enqueue those it wins."""

    help = (
        "Run Relay's scheduler for Dramatiq's periodic actors: import MODULEs (default: each "
        "installed app's tasks module), then enqueue each run this process wins."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("modules", nargs="*", metavar="MODULE", help="modules to import")
        parser.add_argument("--tick", type=float, default=None, help="seconds between ticks")

    def handle(self, *args: Any, modules: list[str], tick: float | None, **options: Any) -> None:
        try:
            from relay_dramatiq import Scheduler, periodic_actors
        except ImportError as exc:
            raise CommandError(f"{exc}: pip install 'relay-scheduler[dramatiq]'") from None
        level = {0: logging.WARNING, 1: logging.INFO}.get(options["verbosity"], logging.DEBUG)
        logging.basicConfig(
            level=level, format="%(asctime)s %(process)d %(levelname)s %(name)s %(message)s"
        )
        names = modules or autodiscovered()
        for name in names:
            try:
                importlib.import_module(name)
            except ImportError as exc:
                raise CommandError(f"cannot import {name!r}: {exc}") from exc
        periodics = periodic_actors()
        if not periodics:
            raise CommandError(
                f"no periodic actor in {', '.join(names) or 'any installed app'}: decorate actors "
                "with @relay_dramatiq.periodic(...) and name their modules, "
                "e.g. manage.py relay_dramatiq myapp.tasks"
            )
        try:
            scheduler = Scheduler(periodics, tick=tick)
        except RelayError as exc:
            raise CommandError(str(exc)) from exc
        scheduler.run()


def autodiscovered() -> list[str]:
    """Each installed app's modules named in ``DRAMATIQ_AUTODISCOVER_MODULES`` (``tasks``)."""
    wanted = getattr(settings, "DRAMATIQ_AUTODISCOVER_MODULES", ["tasks"])
    return [
        f"{app.name}.{name}"
        for app in apps.get_app_configs()
        for name in wanted
        if module_has_submodule(app.module, name)
    ]

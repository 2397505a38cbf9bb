"""``manage.py relay_import_celery_beat``: django-celery-beat's periodic tasks as stored schedules
in the store ``settings.RELAY`` names."""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from relay.backends import capability_of
from relay.contrib.django.celery_beat import apply, plan, rows
from relay.contrib.django.store import backend_url
from relay.control import Control
from relay.errors import RelayError, StoreNotFound, UnsupportedOption
from relay.jobs import LEASE_BACKENDS


class Command(BaseCommand):
    """Read django-celery-beat's ``PeriodicTask`` rows and add each as a Relay stored schedule,
    listing each row it cannot map and why. Importing again changes nothing already imported."""

    help = (
        "Import django-celery-beat's periodic tasks as Relay stored schedules in the store "
        "settings.RELAY names; each row Relay cannot express is listed with the reason."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true",
            help="Print what would be imported; write nothing (the store is opened read-only).",
        )  # fmt: skip
        parser.add_argument(
            "--force", action="store_true",
            help="Import tasks that no live instance allows yet (instances not started yet).",
        )  # fmt: skip
        parser.add_argument(
            "--update", action="store_true",
            help="Replace a stored schedule of the same name whose definition differs "
            "(a new version); without it such a row is listed and left alone.",
        )  # fmt: skip
        parser.add_argument(
            "--by", default=None, help="Who makes the changes (default: user@host)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        dry_run = options["dry_run"]
        try:
            found = rows()
            with self._control(backend_url(), dry_run) as control:
                outcomes = plan(control, found, force=options["force"], update=options["update"])
                if not dry_run:
                    outcomes = apply(control, outcomes, by=options["by"], force=options["force"])
        except RelayError as exc:
            raise CommandError(str(exc)) from None
        for outcome in outcomes:
            self.stdout.write(outcome.line(dry_run))
        counts = Counter(outcome.action for outcome in outcomes)
        words = ("would add", "would update") if dry_run else ("added", "updated")
        self.stdout.write(
            f"{len(outcomes)} periodic tasks: {counts['add']} {words[0]}, {counts['update']} "
            f"{words[1]}, {counts['unchanged']} unchanged, {counts['skip']} not imported"
        )

    @contextmanager
    def _control(self, url: str, dry_run: bool) -> Iterator[Control]:
        """The store; for a dry run opened read-only, or an empty stand-in if it does not exist
        yet (a dry run creates nothing, not even a schema)."""
        if not dry_run:
            with Control(url) as control:
                yield control
            return
        if capability_of(url) == "claim":  # opened as it is, a claim store might be created
            raise UnsupportedOption("schedules", url.partition(":")[0], LEASE_BACKENDS)
        try:
            control = Control(url, read_only=True)
        except StoreNotFound as exc:
            self.stdout.write(f"{exc}: planned against an empty store (no instance is live)")
            with (
                tempfile.TemporaryDirectory() as folder,
                Control(f"sqlite:///{folder}/empty.db") as empty,
            ):
                yield empty
            return
        with control:
            yield control

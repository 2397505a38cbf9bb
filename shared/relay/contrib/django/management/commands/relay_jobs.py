"""``manage.py relay_jobs``: every job in the store ``settings.RELAY`` names, read-only."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from relay.contrib.django.store import job_rows, read_store
from relay.errors import RelayError


class Command(BaseCommand):
    """List each job with its latest run, its live runs and whether it is paused."""

    help = "Relay's jobs: latest run, live runs and pause of each (read-only)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print JSON, not a table")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            with read_store() as backend:
                rows = job_rows(backend)
        except RelayError as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            plain = [json.loads(json.dumps(asdict(r), default=_plain)) for r in rows]
            self.stdout.write(json.dumps(plain, indent=2))
            return
        for row in rows:
            last = row.last
            latest = f"{last.id} {last.state.value}" if last else "no run"
            owner = f" ({last.owner}, token {last.token})" if last and last.owner else ""
            paused = f"  PAUSED by {row.paused_by}: {row.paused_reason}" if row.paused else ""
            self.stdout.write(f"{row.name}  latest {latest}{owner}  live {len(row.live)}{paused}")


def _plain(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else getattr(value, "value", str(value))

"""Event values for the metrics and tracing tests: one run's events, with every field filled."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from relay.events import RunEvent
from relay.runs import run_id

SLOT = datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc)


def run_fields(job: str = "refresh", token: int = 7, attempt: int = 1) -> dict[str, Any]:
    """The fields every run event carries, for a run of ``job`` at SLOT."""
    return {
        "run_id": run_id(job, SLOT),
        "job": job,
        "slot": SLOT,
        "attempt": attempt,
        "token": token,
        "owner": "host:1:abcd",
    }


def event(cls: type[RunEvent], job: str = "refresh", token: int = 7, **extra: Any) -> Any:
    """A ``cls`` event for the run of ``job`` at SLOT with ``token``."""
    attempt = extra.pop("attempt", 1)
    return cls(**run_fields(job, token, attempt), **extra)

"""How `relay` commands print: times, records as JSON values, a console for a terminal or a pipe."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

from rich.console import Console

__all__ = ["console", "iso", "piped", "plain"]


def iso(value: datetime | None) -> str:
    """A time as ISO 8601 to the millisecond, with its zone; nothing for no time."""
    return "" if value is None else value.isoformat(timespec="milliseconds")


def plain(fields: dict[str, Any]) -> dict[str, Any]:
    """A record's fields as JSON values: times as ISO 8601 with their zone, enums as strings."""
    return {
        key: value.isoformat() if isinstance(value, datetime) else getattr(value, "value", value)
        for key, value in fields.items()
    }


def console() -> Console:
    """A console that truncates nothing when its output goes to a pipe or a file."""
    found = Console()
    return found if found.is_terminal else Console(width=100_000)


def piped() -> bool:
    """Whether the output goes to a pipe or a file rather than a terminal."""
    return not sys.stdout.isatty()

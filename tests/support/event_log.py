"""Relay's events as JSON lines from real processes, through stdlib logging and a JSON formatter.

A process calls :func:`record_events` (the test apps do when ``RELAY_T_EVENTS`` names a file);
the test reads the lines back with :func:`read_events`. Several processes append to one file:
each record is one short ``O_APPEND`` write, so lines stay whole.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from pathlib import Path
from typing import Any

from pythonjsonlogger.json import JsonFormatter

__all__ = ["count", "read_events", "record_events"]


class _AppendHandler(logging.Handler):
    """Writes each formatted record as one line with one ``write`` on an ``O_APPEND`` file."""

    def __init__(self, path: str) -> None:
        super().__init__(logging.DEBUG)
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        line = (self.format(record) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def record_events(path: str | None = None) -> None:
    """Log every Relay event of this process (DEBUG and up) as JSON to ``path``."""
    path = path or os.environ.get("RELAY_T_EVENTS")
    if not path:
        return
    handler = _AppendHandler(path)
    handler.setFormatter(JsonFormatter("%(name)s %(levelname)s %(message)s %(process)d"))
    logger = logging.getLogger("relay.events")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)


def read_events(path: Path, kind: str | None = None) -> list[dict[str, Any]]:
    """The events logged so far (of type ``kind``), in the order they were written."""
    if not path.exists():
        return []
    text = path.read_text()
    # Other processes append as this one reads: a last line without its newline is half-written.
    complete = text[: text.rfind("\n") + 1]
    lines = [json.loads(line) for line in complete.splitlines() if line.strip()]
    events = [e for e in lines if "relay_event" in e]
    return [e for e in events if kind is None or e["relay_event"] == kind]


def count(events: list[dict[str, Any]], kind: str) -> Counter[str]:
    """How many events of type ``kind`` each run id (or job, for ``missed``) has."""
    key = "relay_job" if kind == "missed" else "relay_run_id"
    return Counter(e[key] for e in events if e["relay_event"] == kind)

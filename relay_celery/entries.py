"""Each ``beat_schedule`` entry's Relay options, from ``app.conf.relay_jobs`` or the entry itself.

``app.conf.relay_jobs = {"entry name": {"overlap": "skip"}}`` is the form to prefer: Celery's stock
scheduler ignores it, so switching back to it is one setting. The older ``"relay"`` key inside an
entry still works, but the stock scheduler cannot load an entry that carries it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from relay.errors import ConfigurationError
from relay.settings import closest

__all__ = ["RELAY_OPTIONS", "entry_options", "jobs_options"]

log = logging.getLogger("relay.celery.beat")

RELAY_OPTIONS = frozenset(
    {
        "overlap", "max_attempts", "catch_up", "stale_after", "jitter",
        "expect_success_within", "alert_after_failures",
    }
)  # fmt: skip
"""Keys an entry's Relay options may set."""


def entry_options(entry_name: str, options: Any, where: str = "'relay'") -> dict[str, Any]:
    """Check one entry's options: a dict of :data:`RELAY_OPTIONS` keys."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ConfigurationError(
            f"beat_schedule entry {entry_name!r}: {where} must be a dict such as "
            f"{{'overlap': 'skip'}}, got {type(options).__name__}"
        )
    unknown = sorted(set(options) - RELAY_OPTIONS)
    if unknown:
        hints = [_with_hint(str(key), RELAY_OPTIONS) for key in unknown]
        raise ConfigurationError(
            f"beat_schedule entry {entry_name!r}: unknown relay option(s) {', '.join(hints)}; "
            f"known: {', '.join(sorted(RELAY_OPTIONS))}"
        )
    return dict(options)


def jobs_options(
    relay_jobs: Any, from_entries: dict[str, dict[str, Any]], entries: Iterable[str]
) -> dict[str, dict[str, Any]]:
    """Merge ``app.conf.relay_jobs`` with the options entries carry under their ``"relay"`` key.

    An entry's options live in one place: naming an entry in both is refused, as is a
    ``relay_jobs`` name that is no ``beat_schedule`` entry (a typo would drop its options).
    """
    names = set(entries)
    carried = sorted(name for name, options in from_entries.items() if options)
    if carried:
        log.warning(
            "beat_schedule entries %s carry Relay options under a 'relay' key, which Celery's "
            "stock scheduler cannot load: move them to app.conf.relay_jobs (CELERY_RELAY_JOBS "
            "in Django) so that switching back to it stays a one-setting change",
            ", ".join(carried),
        )
    if relay_jobs is None:
        return from_entries
    if not isinstance(relay_jobs, Mapping):
        raise ConfigurationError(
            "app.conf.relay_jobs must map beat_schedule entry names to their Relay options, "
            f"such as {{'refresh': {{'overlap': 'skip'}}}}; got {type(relay_jobs).__name__}"
        )
    merged = dict(from_entries)
    for name, options in relay_jobs.items():
        if name not in names:
            raise ConfigurationError(
                f"app.conf.relay_jobs names {_with_hint(str(name), names)}, which is not a "
                f"beat_schedule entry; entries: {', '.join(sorted(names)) or 'none'}"
            )
        if from_entries.get(name):
            raise ConfigurationError(
                f"beat_schedule entry {name!r} has Relay options both in app.conf.relay_jobs and "
                "under its 'relay' key: keep them in app.conf.relay_jobs only"
            )
        merged[name] = entry_options(name, options, where=f"app.conf.relay_jobs[{name!r}]")
    return merged


def _with_hint(name: str, known: Iterable[str]) -> str:
    close = closest(name, known)
    return f"{name!r} (did you mean {close!r}?)" if close else repr(name)

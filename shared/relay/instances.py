"""An instance as a lease store records it: the value ``record_instance`` and ``instances`` carry.

The model under the contract (:mod:`relay.contract`) and the stores; the heartbeat that writes it
lives with the hosts' helpers in :mod:`relay.health`, which re-exports these names.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = [
    "LATE_AFTER_BEATS",
    "ROLES",
    "InstanceInfo",
    "definitions_json",
    "is_alive",
    "is_healthy",
    "parse_definitions",
]

ROLES = ("scheduler", "beat", "worker", "dramatiq-scheduler", "dramatiq-worker")
"""What an instance does: the standalone scheduler, Celery beat, a Celery worker, the Dramatiq
scheduler process, a Dramatiq worker."""
LATE_AFTER_BEATS = 3
"""An instance that missed this many beats counts as dead (unless a probe gives ``max_age``)."""


@dataclass(frozen=True)
class InstanceInfo:
    """One instance as a lease store records it.

    ``beat_at`` and ``expires_at`` are set by the store, on its own clock, when it records a beat;
    they are ``None`` in the value an instance hands to ``record_instance``.
    """

    owner: str
    """The instance's owner name, the one its leases carry (``host:pid:random`` by default)."""
    role: str
    """One of :data:`ROLES`."""
    host: str
    pid: int
    started_at: datetime
    """When the instance started (its own clock, UTC)."""
    version: str
    """The Relay version it runs."""
    interval: float
    """Seconds between its beats: a probe's default ``max_age`` is a few of these."""
    beat_at: datetime | None = None
    """Its last beat, on the store's clock."""
    expires_at: datetime | None = None
    """When the store forgets it unless it beats again, on the store's clock."""
    tasks: tuple[str, ...] = ()
    """The tasks it allows stored schedules to run (``@scheduler.task("name")``), by name."""
    definitions: Mapping[str, str] = field(default_factory=dict)
    """The hash of each job's definition it decides (:mod:`relay.definitions`), by job name;
    empty for an instance that declares none (a worker, Relay 0.1.0)."""
    definition_texts: Mapping[str, str] = field(default_factory=dict)
    """The readable form of each hash in :attr:`definitions`."""
    problem: str | None = None
    """Why the instance is not working although it beats: its ticks have failed for longer than
    a lease, or its store needs a newer Relay (``None``: working). ``relay health`` counts it
    unhealthy whatever its last beat; Relay 0.1 neither writes nor reads it."""


def definitions_json(info: InstanceInfo) -> str | None:
    """``info``'s declared definitions as the JSON text stores keep (``None``: none declared).

    Encoded once per pair of maps: an instance beats with the same ones until its jobs change,
    and 100,000 jobs are a few megabytes to encode.
    """
    if not info.definitions:
        return None
    key = (id(info.definitions), id(info.definition_texts))
    cached = _ENCODED.get(key)
    if cached is not None and cached[0] is info.definitions and cached[1] is info.definition_texts:
        return cached[2]
    text = json.dumps(
        {"jobs": dict(info.definitions), "texts": dict(info.definition_texts)},
        separators=(",", ":"),
    )
    if len(_ENCODED) >= _ENCODED_KEPT:
        _ENCODED.clear()
    _ENCODED[key] = (info.definitions, info.definition_texts, text)
    return text


_ENCODED: dict[tuple[int, int], tuple[Mapping[str, str], Mapping[str, str], str]] = {}
_ENCODED_KEPT = 16
"""Encodings kept (the maps are held too, so an id is never reused while its entry lives)."""


def parse_definitions(value: object) -> dict[str, Any]:
    """The ``definitions`` and ``definition_texts`` of :class:`InstanceInfo` from what a store
    kept (JSON text, its parsed value, or nothing). Keys a newer Relay added are ignored.

    JSON text is decoded once per distinct text: peers beat with the same declaration until
    their jobs change, so reading them every beat costs a hash of the text, not a decode.
    """
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str):
        return _decoded(value)
    if not isinstance(value, dict):
        return {}
    return {
        "definitions": dict(value.get("jobs") or {}),
        "definition_texts": dict(value.get("texts") or {}),
    }


@functools.lru_cache(maxsize=64)
def _decoded(text: str) -> dict[str, Any]:
    """:func:`parse_definitions` of JSON text; the maps are shared: callers never change them."""
    return parse_definitions(json.loads(text))


def is_alive(info: InstanceInfo, now: datetime, max_age: float | None = None) -> bool:
    """Whether ``info`` beat within ``max_age`` seconds of ``now`` (the store's clock).

    ``max_age`` defaults to :data:`LATE_AFTER_BEATS` of the instance's own interval.
    """
    if info.beat_at is None:
        return False
    limit = LATE_AFTER_BEATS * info.interval if max_age is None else max_age
    return (now - info.beat_at).total_seconds() <= limit


def is_healthy(info: InstanceInfo, now: datetime, max_age: float | None = None) -> bool:
    """Whether ``info`` is alive (:func:`is_alive`) and working: it recorded no ``problem``."""
    return info.problem is None and is_alive(info, now, max_age)

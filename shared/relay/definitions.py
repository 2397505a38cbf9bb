"""Job definitions across a fleet: what each instance declares, and which one decides a job.

During a rolling deploy, instances with the old code and with the new one run side by side. If a
job's schedule changed in that deploy (``0 9 * * *`` to ``0 10 * * *``), the old instances would
fire the old slots and the new ones the new slots: the job would run twice that day. So every
deciding instance declares, with its heartbeat, a :class:`Definition` of each of its jobs: a
stable hash and a readable form of what decides which slots exist and how they run (the schedule,
its time zone, and the options ``overlap``, ``max_attempts``, ``catch_up``, ``stale_after``,
``jitter``). :func:`deciding` picks, for each job, the one definition that decides all its slots:

1. the definition of the live instances running the **newest Relay release**, then
2. among those, the one of the **most recently started** instance (then the greatest owner name,
   so that every instance picks the same one).

The latest deploy is the operator's latest intent: a new definition rolled out wins as soon as its
first instance is up, and a rollback (the old code started again, later) wins back. The release
comes first so that a canary of a newer Relay is not overruled by an old instance restarted
beside it. An instance holding another definition does not fire the job; the engine reports it.

Instances that declare nothing (Relay 0.1.0, workers, claim stores) take no part: they neither
decide nor hold anyone back. Nor does an instance that is not working (it recorded a
:attr:`~relay.instances.InstanceInfo.problem`: its ticks have failed for longer than a lease, or
its store needs a newer Relay), like a dead one: it fires nothing, so it must not hold the job.
Jobs of stored schedules are not declared: every instance reads them from the store, versioned
(:mod:`relay.stored`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from relay.instances import InstanceInfo, is_healthy
from relay.jobs import DEFAULT_MAX_ATTEMPTS, Job
from relay.schedules import BoundedSchedule, CronSchedule, EverySchedule, OnceSchedule

__all__ = ["Choice", "Definition", "Held", "deciding", "definition_of", "release_key"]

HASH_LENGTH = 12
"""Hex digits of a definition's hash kept: enough to tell a job's few definitions apart."""


@dataclass(frozen=True)
class Definition:
    """One job's definition as an instance declares it."""

    hash: str
    """A stable hash of the definition: equal on every instance and release for equal options."""
    text: str
    """The readable form, such as ``cron '0 9 * * *' (UTC), overlap=skip``."""


@dataclass(frozen=True)
class Choice:
    """The definition that decides a job's slots, and who declared it."""

    job: str
    definition: Definition
    owner: str
    """The instance whose declaration decided (the newest release, then the latest started)."""
    version: str
    """That instance's Relay version."""
    others: tuple[tuple[Definition, tuple[str, ...]], ...] = ()
    """The other definitions live instances hold, each with the owners holding it."""
    holders: tuple[str, ...] = ()
    """The owners holding the deciding definition."""


@dataclass(frozen=True)
class Held:
    """A job this instance does not fire: a live peer's definition decides it."""

    job: str
    ours: Definition
    deciding: Choice


def definition_of(job: Job) -> Definition | None:
    """``job``'s definition, or ``None`` for a stored schedule's job (versioned in the store).

    Keep the hash the same across releases for the same options: a release that changed it would
    make every job look changed while it rolls out (its instances, the newest release, would then
    decide every job, and the older ones fire none).
    """
    schedule = job.schedule
    if isinstance(schedule, BoundedSchedule):
        return None
    shape: dict[str, Any]
    if isinstance(schedule, CronSchedule):
        shape = {"cron": schedule.expression, "tz": str(schedule.tz)}
    elif isinstance(schedule, EverySchedule):
        shape = {"every": schedule.interval}
    elif isinstance(schedule, OnceSchedule):
        shape = {"at": schedule.at.isoformat()}
    else:  # a schedule of the user's own: its description is all that is known of it
        shape = {"schedule": schedule.describe()}
    options = {
        "overlap": job.overlap, "max_attempts": job.max_attempts, "catch_up": job.catch_up,
        "stale_after": job.stale_after, "jitter": job.jitter,
    }  # fmt: skip
    canonical = json.dumps({**shape, **options}, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:HASH_LENGTH]
    return Definition(digest, _text(schedule.describe(), options))


def _text(schedule: str, options: Mapping[str, Any]) -> str:
    """The schedule, then each option that differs from a job's default."""
    defaults = {
        "overlap": "allow", "max_attempts": DEFAULT_MAX_ATTEMPTS, "catch_up": 0.0,
        "stale_after": None, "jitter": 0.0,
    }  # fmt: skip
    changed = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
               for k, v in options.items() if v != defaults[k]]  # fmt: skip
    return ", ".join([schedule, *changed])


def release_key(version: str) -> tuple[int, ...]:
    """A Relay version as numbers to compare (``"0.2.0"`` -> ``(0, 2, 0)``); a pre-release or
    local suffix is ignored, an unreadable version sorts first."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip().lstrip("v"))
    return tuple(int(part) for part in match.group().split(".")) if match else ()


def deciding(
    instances: Iterable[InstanceInfo], now: datetime, jobs: Iterable[str] | None = None
) -> dict[str, Choice]:
    """The definition deciding each job live ``instances`` declare (of ``jobs`` only, if given).

    ``now`` is the store's clock: an instance that missed its beats is not alive and decides
    nothing, nor does one that recorded a problem (:func:`~relay.instances.is_healthy`).
    Instances declaring nothing are left out.
    """
    wanted = None if jobs is None else set(jobs)
    ranked = sorted(
        (i for i in instances if i.definitions and is_healthy(i, now)),
        key=lambda i: (release_key(i.version), i.started_at, i.owner),
        reverse=True,
    )
    held: dict[str, dict[str, list[str]]] = {}  # job -> hash -> owners, best ranked first
    first: dict[str, InstanceInfo] = {}
    for info in ranked:
        for job, digest in info.definitions.items():
            if wanted is not None and job not in wanted:
                continue
            first.setdefault(job, info)
            held.setdefault(job, {}).setdefault(digest, []).append(info.owner)
    texts: dict[str, str] = {}
    for info in ranked:
        for digest, text in info.definition_texts.items():
            texts.setdefault(digest, text)
    choices = {}
    for job, by_hash in held.items():
        top = first[job]
        chosen = top.definitions[job]
        choices[job] = Choice(
            job=job,
            definition=Definition(chosen, texts.get(chosen, "?")),
            owner=top.owner,
            version=top.version,
            others=tuple(
                (Definition(digest, texts.get(digest, "?")), tuple(owners))
                for digest, owners in by_hash.items()
                if digest != chosen
            ),
            holders=tuple(by_hash[chosen]),
        )
    return choices

"""What a lease store, as it is configured, can cost when something fails: ``relay doctor``.

A backend reads its store's own durability and replication settings (``durability_facts()``: the
journal mode, ``fsync`` and ``synchronous_commit``, ``appendonly`` and the replicas, a bucket's
storage and replicas...) and only reads them. :func:`diagnose` judges them against one table of
rules per store (:mod:`relay.doctor_rules`) and says, for each failure in :data:`FAILURES`, what
it can cost: ``"nothing"``, ``"run twice"`` (the store may forget a lease or a finish, so a run
runs again) or ``"unknown"`` (a setting the rule needs could not be read: a managed service or an
ACL refused it). Each :class:`Finding` names the settings it read and the one to change.

Claim stores are not judged: they remember only who won, so any loss of that record lets a second
instance win the run; :func:`claim_store_refusal` says so.

A store with no Relay data yet (no file, schema, key under the prefix or bucket) is judged too:
:func:`diagnose_url` reads its server's settings, creating nothing, and the report says no Relay
data was found (:attr:`DoctorReport.relay_data`).
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from relay.backends import capability_of, open_backend
from relay.backends._url import BackendURL
from relay.doctor_rules import (
    FAILURES,
    READ_HINTS,
    TABLES,
    WARNINGS,
    Cost,
    Facts,
    Failure,
    Rule,
    UnknownFact,
)
from relay.errors import ConfigurationError

__all__ = [
    "FAILURES",
    "Cost",
    "DoctorReport",
    "DurabilityReader",
    "Failure",
    "Finding",
    "claim_store_refusal",
    "diagnose",
    "diagnose_url",
]


@runtime_checkable
class DurabilityReader(Protocol):
    """A backend that can tell the doctor its store's settings."""

    def durability_facts(self) -> dict[str, object]:
        """The settings, by name, with ``"store"`` naming the store's table of rules; ``None``
        for a setting the server refused to show. Reads only: never writes or creates."""
        ...


@dataclass(frozen=True)
class Finding:
    """What one failure can cost this store, why, and what to change."""

    failure: Failure
    cost: Cost
    why: str
    settings: dict[str, object]
    """The settings the rule read, by name (``None``: the store would not show it)."""
    fix: str
    """The setting to change; empty when the failure costs nothing."""


@dataclass(frozen=True)
class DoctorReport:
    """What ``relay doctor`` says about one store."""

    store: str
    """The store's name, passwords masked."""
    facts: dict[str, object]
    """Every setting read (``None``: the store would not show it)."""
    findings: tuple[Finding, ...]
    warnings: tuple[str, ...] = field(default=())
    """States that stop or slow every step now (a replica in the URL, a synchronous standby
    missing), whatever fails next."""
    relay_data: bool = True
    """Whether the store holds Relay's data yet (``False``: the settings are the server's, or
    those Relay will create the store with, and nothing was created to read them)."""

    @property
    def runs_twice(self) -> bool:
        """Whether some failure may run a run twice."""
        return any(f.cost == "run twice" for f in self.findings)

    @property
    def unknown(self) -> tuple[Failure, ...]:
        """The failures whose cost cannot be told: the store hid a setting their rule needs."""
        return tuple(f.failure for f in self.findings if f.cost == "unknown")

    @property
    def passes_strict(self) -> bool:
        """What ``relay doctor --strict`` asks: no failure may run a run twice, and every
        failure could be judged (what cannot be told counts as what could happen)."""
        return not self.runs_twice and not self.unknown

    def as_json(self) -> dict[str, Any]:
        """The report as JSON values (``relay doctor --json``)."""
        return {
            "store": self.store,
            "facts": self.facts,
            "findings": [
                {"failure": f.failure, "cost": f.cost, "why": f.why, "settings": f.settings,
                 "fix": f.fix}
                for f in self.findings
            ],
            "warnings": list(self.warnings), "relay_data": self.relay_data,
            "runs_twice": self.runs_twice, "unknown": list(self.unknown),
            "passes_strict": self.passes_strict,
        }  # fmt: skip


def diagnose(backend: object) -> DoctorReport:
    """Read ``backend``'s store settings and judge each failure of :data:`FAILURES`.

    Raises :class:`ConfigurationError` for a backend that cannot tell its settings (a claim
    store, or a third-party backend without ``durability_facts()``).
    """
    name = str(getattr(backend, "name", type(backend).__name__))
    if getattr(backend, "capability", "lease") != "lease":
        raise ConfigurationError(claim_store_refusal(name))
    if not isinstance(backend, DurabilityReader):
        raise ConfigurationError(
            f"{name} does not report its settings (no durability_facts()): relay doctor knows "
            "SQLite, PostgreSQL, Redis and NATS KV lease stores"
        )
    values = dict(backend.durability_facts())
    relay_data = bool(values.pop("relay_data", True))
    table = TABLES[str(values["store"])]
    findings = tuple(_judge(failure, table[failure], values) for failure in FAILURES)
    warnings = tuple(
        _format(text, values)
        for when, text in WARNINGS.get(str(values["store"]), ())
        if _holds(when, Facts(values))
    )
    return DoctorReport(name, values, findings, warnings, relay_data)


def diagnose_url(url: str) -> DoctorReport:
    """:func:`diagnose` the lease store ``url`` names, opened read-only: one with no Relay data
    yet is judged on its server's settings, and nothing is created to read them.

    Raises :class:`ConfigurationError` for a claim URL before opening it (opening one may create
    its queue or stream), and what :func:`relay.open_backend` raises for a URL it cannot open.
    """
    if capability_of(url) != "lease":
        raise ConfigurationError(claim_store_refusal(BackendURL(url).redacted()))
    backend = open_backend(url, read_only=True, empty_ok=True)
    try:
        return diagnose(backend)
    finally:
        backend.close()


def claim_store_refusal(store: str) -> str:
    """Why ``relay doctor`` does not judge a claim store, and what such a store can cost."""
    return (
        f"{store} is a claim backend: relay doctor judges lease stores. A claim store remembers "
        "only who won each run, so anything that loses that record (a restart without "
        "persistence, a failover to a replica that was behind) lets a second instance win the "
        "same run, and a winner that dies loses its run (docs/claim-or-lease.md). For a "
        "judgement, use the same server as a lease store: drop strategy= (redis://, nats://)"
    )


def _judge(failure: Failure, rules: tuple[Rule, ...], values: Mapping[str, object]) -> Finding:
    facts = Facts(values)
    for rule in rules:
        try:
            holds = rule.when(facts)
        except UnknownFact as unknown:
            name = unknown.name
            return Finding(
                failure, "unknown",
                f"the store would not show {name} (an ACL or a managed service hides it), so "
                "what this failure costs cannot be told",
                _settings(facts, ""),
                READ_HINTS.get(name, f"let the URL's user read {name}"),
            )  # fmt: skip
        if holds:
            why, fix = _format(rule.why, values), _format(rule.fix, values)
            return Finding(failure, rule.cost, why, _settings(facts, rule.why + rule.fix), fix)
    raise AssertionError(f"no rule for {failure} in {values.get('store')}: end with an ALWAYS")


def _holds(when: Callable[[Facts], bool], facts: Facts) -> bool:
    try:
        return when(facts)
    except UnknownFact:
        return False


def _settings(facts: Facts, text: str) -> dict[str, object]:
    names = list(facts.read)
    names += [n for _, n, _, _ in string.Formatter().parse(text) if n and n not in names]
    return {name: facts.values.get(name) for name in names}


def _format(text: str, values: Mapping[str, object]) -> str:
    shown = {k: "unknown" if v is None else v for k, v in values.items()}
    return text.format_map(_Missing(shown))


class _Missing(dict[str, object]):
    def __missing__(self, key: str) -> str:
        return "unknown"

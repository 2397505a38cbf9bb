"""The doctor's tables judged on settings no shared server here has (standbys, three NATS
servers, ``wait_replicas``); ``tests/test_doctor.py`` reads the settings from real servers.

These feed settings to :func:`relay.doctor.diagnose` as a backend's ``durability_facts()`` would
return them: they check the rules, not any backend.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from relay import ConfigurationError, Control
from relay.doctor import FAILURES, DoctorReport, diagnose
from relay.doctor_rules import TABLES

PG = {
    "store": "postgresql", "version": "16.4", "role": "primary", "fsync": "on",
    "synchronous_commit": "on", "synchronous_standby_names": "", "standbys": 0,
    "standby_names": [], "sync_standbys": 0,
}  # fmt: skip
REDIS = {
    "store": "redis", "version": "7.2.4", "role": "primary", "connected_replicas": 0,
    "appendonly": "yes", "appendfsync": "always", "save": "", "min_replicas_to_write": 0,
    "min_replicas_max_lag": 10, "wait_replicas": 0,
}  # fmt: skip
NATS = {
    "store": "nats", "version": "2.10.22", "storage": "file", "replicas": 1, "peers_current": 1,
    "cluster": "", "servers_known": 1,
}  # fmt: skip


class Store:
    """A lease backend that reports the given settings."""

    capability = "lease"

    def __init__(self, **facts: object) -> None:
        self.facts = facts
        self.name = f"{facts['store']} (test)"

    def durability_facts(self) -> dict[str, object]:
        return dict(self.facts)


def judged(**facts: object) -> tuple[dict[str, str], DoctorReport]:
    report = diagnose(Store(**facts))
    return {f.failure: f.cost for f in report.findings}, report


def test_every_table_judges_every_failure_and_ends_with_a_rule_that_always_holds() -> None:
    for store, table in TABLES.items():
        assert tuple(table) == FAILURES, store
        for failure, rules in table.items():
            assert rules[-1].when.__name__ == "ALWAYS", (store, failure)


def test_postgres_async_standbys_may_run_a_run_twice_after_a_failover() -> None:
    costs, report = judged(**{**PG, "standbys": 2, "standby_names": ["a", "b"]})
    assert costs["failover"] == costs["partition"] == "run twice"
    failover = next(f for f in report.findings if f.failure == "failover")
    assert "asynchronously" in failover.why and "synchronous_standby_names" in failover.fix
    assert report.runs_twice


@pytest.mark.parametrize("commit", ["on", "remote_write", "remote_apply"])
def test_postgres_a_synchronous_standby_makes_a_failover_cost_nothing(commit: str) -> None:
    settings = {"synchronous_commit": commit, "synchronous_standby_names": "FIRST 1 (a)"}
    costs, report = judged(**{**PG, **settings, "standbys": 2, "sync_standbys": 1})
    assert set(costs.values()) == {"nothing"} and report.passes_strict


def test_postgres_synchronous_commit_local_with_a_sync_standby_is_still_asynchronous() -> None:
    settings = {"synchronous_commit": "local", "synchronous_standby_names": "a"}
    costs, _ = judged(**{**PG, **settings, "standbys": 1, "sync_standbys": 1})
    assert costs["failover"] == "run twice"


def test_postgres_commit_and_fsync_off() -> None:
    costs, _ = judged(**{**PG, "synchronous_commit": "off"})
    assert costs["store restart"] == costs["power loss"] == "run twice"
    costs, report = judged(**{**PG, "fsync": "off"})
    assert costs["store restart"] == "nothing" and costs["power loss"] == "run twice"
    loss = next(f for f in report.findings if f.failure == "power loss")
    assert loss.settings == {"fsync": "off"} and "fsync = on" in loss.fix


def test_postgres_hidden_standby_states_are_unknown_and_warnings() -> None:
    names = {"synchronous_standby_names": "a"}
    costs, report = judged(**{**PG, **names, "standbys": 1, "sync_standbys": None})
    assert costs["failover"] == "unknown" and report.unknown == ("failover", "partition")
    assert not report.runs_twice and not report.passes_strict
    failover = next(f for f in report.findings if f.failure == "failover")
    assert "sync_standbys" in failover.why and failover.settings["sync_standbys"] is None
    assert "pg_monitor" in failover.fix
    _, waiting = judged(**{**PG, "synchronous_standby_names": "a", "role": "standby"})
    assert len(waiting.warnings) == 2
    assert "standby (in recovery)" in waiting.warnings[0]
    assert "every commit waits" in waiting.warnings[1]


def test_redis_wait_replicas_makes_a_failover_and_a_partition_cost_nothing() -> None:
    replicated = {**REDIS, "connected_replicas": 1}
    costs, _ = judged(**replicated)
    assert costs["failover"] == costs["partition"] == "run twice"
    costs, report = judged(**{**replicated, "wait_replicas": 1})
    assert set(costs.values()) == {"nothing"} and not report.warnings
    two = {**REDIS, "connected_replicas": 2, "wait_replicas": 1}
    costs, report = judged(**two)
    assert costs["failover"] == "nothing" and costs["partition"] == "run twice"
    assert "wait_replicas=2" in report.findings[4].fix
    costs, _ = judged(**{**two, "wait_replicas": 2})
    assert costs["partition"] == "nothing"
    _, short = judged(**{**replicated, "wait_replicas": 2, "min_replicas_to_write": 3})
    assert ["not acknowledged" in w or "refuses every write" in w for w in short.warnings] == [
        True,
        True,
    ]


def test_redis_append_only_file_fsync_policies() -> None:
    for fsync, cost in (("always", "nothing"), ("everysec", "run twice"), ("no", "run twice")):
        costs, _ = judged(**{**REDIS, "appendfsync": fsync})
        assert costs["store restart"] == "nothing" and costs["power loss"] == cost, fsync
    costs, report = judged(**{**REDIS, "appendonly": "no", "save": "3600 1"})
    assert costs["store restart"] == costs["power loss"] == "run twice"
    assert "last snapshot (save '3600 1')" in report.findings[1].why
    costs, report = judged(**{**REDIS, "appendonly": "no", "save": None})  # CONFIG refused
    assert costs["store restart"] == costs["power loss"] == "run twice"
    assert "(save 'unknown')" in report.findings[1].why


def test_nats_three_replicas_cost_nothing_and_a_missing_peer_is_a_warning() -> None:
    costs, report = judged(**{**NATS, "replicas": 3, "peers_current": 3, "servers_known": 3})
    assert set(costs.values()) == {"nothing"} and not report.warnings
    _, degraded = judged(**{**NATS, "replicas": 3, "peers_current": 2})
    assert degraded.warnings == ("2 of the bucket's 3 servers are current: writes need a "
                                 "majority of them",)  # fmt: skip


def test_a_claim_store_or_a_backend_without_facts_is_refused(tmp_path: Path) -> None:
    claims = Control(f"sqlite:///{tmp_path / 'claims.db'}?strategy=claim")
    with claims, pytest.raises(ConfigurationError, match="is a claim backend: relay doctor"):
        claims.doctor()

    class Silent:
        capability = "lease"
        name = "Mystery store"

    with pytest.raises(ConfigurationError, match="Mystery store does not report its settings"):
        diagnose(Silent())

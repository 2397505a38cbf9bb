"""``relay overdue``, ``relay health --jobs`` and ``relay alert-rules --prometheus``."""

from __future__ import annotations

import json
from datetime import timedelta

import yaml
from click.testing import CliRunner

from relay import AcquireRequest, LeaseBackend, open_backend
from relay.cli import main
from relay.health import InstanceHeartbeat

EVERY_MINUTE = '{"every": 60.0, "schedule": "every 60s"}'


def succeeded(store: LeaseBackend, job: str, ago: float) -> None:
    slot = (store.now() - timedelta(seconds=ago)).replace(second=0, microsecond=0)
    won = store.acquire(AcquireRequest(job, slot, "host-a:1", 30)).run
    assert won is not None
    store.start(won.id, won.token, won.owner, 30)
    store.finish(won.id, won.token, succeeded=True)


def populate(url: str, *, late: bool) -> None:
    store = open_backend(url)
    assert isinstance(store, LeaseBackend)
    store.register_jobs({"fine": EVERY_MINUTE, "export": EVERY_MINUTE})
    succeeded(store, "fine", 0)
    succeeded(store, "export", 3600 if late else 0)
    InstanceHeartbeat(store, "host-a:1", "scheduler", interval=60).record()
    store.close()


def test_overdue_lists_the_late_job_and_exits_1(lease_url: str) -> None:
    populate(lease_url, late=True)

    table = CliRunner().invoke(main, ["overdue", "--backend", lease_url])
    assert table.exit_code == 1, table.output
    assert "export" in table.output and "overdue" in table.output and "fine" not in table.output

    listed = CliRunner().invoke(main, ["overdue", "--backend", lease_url, "--json", "--all"])
    assert listed.exit_code == 1
    found = {row["job"]: row for row in json.loads(listed.output)}
    assert (found["export"]["state"], found["fine"]["state"]) == ("overdue", "ok")
    assert found["export"]["outcome"] == "no record"
    assert found["export"]["expected_by"] < found["export"]["now"]

    one = CliRunner().invoke(main, ["overdue", "--backend", lease_url, "--job", "fine"])
    assert one.exit_code == 0 and "no job is overdue or failing (1 checked)" in one.output
    typo = CliRunner().invoke(main, ["overdue", "--backend", lease_url, "--job", "exprot"])
    assert typo.exit_code == 1 and "no job named 'exprot'" in typo.output

    probe = CliRunner().invoke(main, ["health", "--backend", lease_url, "--jobs"])
    assert probe.exit_code == 1, probe.output
    assert "overdue: job export" in probe.output and "alive: scheduler host-a:1" in probe.output
    assert CliRunner().invoke(main, ["health", "--backend", lease_url]).exit_code == 0


def test_nothing_overdue_exits_0(lease_url: str) -> None:
    populate(lease_url, late=False)
    quiet = CliRunner().invoke(main, ["overdue", "--backend", lease_url])
    assert quiet.exit_code == 0 and "(2 checked)" in quiet.output
    assert CliRunner().invoke(main, ["health", "--backend", lease_url, "--jobs"]).exit_code == 0


def test_alert_rules_are_prometheus_rules_on_the_exported_gauges() -> None:
    printed = CliRunner().invoke(main, ["alert-rules", "--prometheus", "--for", "10m"])
    assert printed.exit_code == 0, printed.output
    rules = {r["alert"]: r for r in yaml.safe_load(printed.output)["groups"][0]["rules"]}
    assert sorted(rules) == ["RelayJobFailing", "RelayJobOverdue", "RelayJobsNotExported"]
    overdue = rules["RelayJobOverdue"]
    assert overdue["expr"].startswith("time() > max by (job) (last_over_time(")
    assert "relay_job_expected_success_by_timestamp_seconds[7d]" in overdue["expr"]
    assert overdue["for"] == "10m"
    assert "{{ $labels.job }}" in overdue["annotations"]["summary"]
    assert "relay_job_failing" in rules["RelayJobFailing"]["expr"]
    refused = CliRunner().invoke(main, ["alert-rules"])
    assert refused.exit_code == 2 and "--prometheus" in refused.output

"""Prometheus alerting rules on the job gauges :mod:`relay.metrics` exports from the store.

``relay alert-rules --prometheus`` prints them. The overdue rule compares ``time()`` with the
expected-success time last exported (``last_over_time`` over :data:`LOOKBACK`): once a job's
slot has not succeeded by then, it fires, whether or not any instance or exporter is still up.
A job with no expectation (paused, opted out, never run) exports ``+Inf``, which never fires.
The exporter's label ``job`` names Relay's job: scrape it with ``honor_labels: true`` so that
Prometheus keeps it (else it becomes ``exported_job``).
"""

from __future__ import annotations

__all__ = ["LOOKBACK", "prometheus_rules"]

LOOKBACK = "7d"
"""How far back the overdue rule looks for the last exported expectation: alerts keep firing
this long after the last exporter died."""

_RULES = """\
groups:
  - name: relay-jobs
    rules:
      - alert: RelayJobOverdue
        expr: >-
          time() > max by (job) (last_over_time(
          {ns}_job_expected_success_by_timestamp_seconds[{lookback}]))
        for: {for_}
        labels:
          severity: critical
        annotations:
          summary: "Relay job {{{{ $labels.job }}}} has not succeeded in time"
          description: >-
            No run of {{{{ $labels.job }}}} succeeded by the time its oldest pending slot
            expected (expect_success_within). Fires even when every instance is down.
            Run `relay overdue` for the slot and what became of it.
      - alert: RelayJobFailing
        expr: max by (job) ({ns}_job_failing) > 0
        for: {for_}
        labels:
          severity: warning
        annotations:
          summary: "Relay job {{{{ $labels.job }}}} is failing"
          description: >-
            The latest slots of {{{{ $labels.job }}}} in a row failed, were missed or went stale
            (alert_after_failures). Run `relay runs --job {{{{ $labels.job }}}}` for their errors.
      - alert: RelayJobsNotExported
        expr: absent({ns}_job_expected_success_by_timestamp_seconds)
        for: {for_}
        labels:
          severity: warning
        annotations:
          summary: "No Relay exporter reports the jobs' expectations"
          description: >-
            No process exports {ns}_job_expected_success_by_timestamp_seconds: start
            `python -m relay.metrics --backend URL` (outside the fleet, ideally).
"""


def prometheus_rules(namespace: str = "relay", for_: str = "5m") -> str:
    """The rules as a Prometheus rule file (YAML), for metrics named ``namespace_…``."""
    return _RULES.format(ns=namespace, for_=for_, lookback=LOOKBACK)

"""relay.metrics: each event moves the metric it should, once; the gauge never drifts."""

from __future__ import annotations

import sys
import time
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from relay import metrics
from relay.errors import MissingDependency
from relay.events import (
    EventBus,
    FencedOff,
    RunAbandoned,
    RunExhausted,
    RunFailed,
    RunHandedOver,
    RunLeaseLost,
    RunSkipped,
    RunsMissed,
    RunStarted,
    RunSucceeded,
    RunTakenOver,
    StoreUnavailable,
)
from tests.metrics.events import SLOT, event


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def bus(registry: CollectorRegistry) -> EventBus:
    bus = EventBus()
    metrics.instrument(bus, registry)
    return bus


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def test_a_run_that_succeeds_counts_once_with_its_delay_and_duration(
    bus: EventBus, registry: CollectorRegistry
) -> None:
    bus.emit(event(RunStarted, start_delay=0.3))
    assert value(registry, "relay_live_leases") == 1
    before = time.time()
    bus.emit(event(RunSucceeded, duration=2.0))

    assert value(registry, "relay_runs_total", job="refresh", outcome="succeeded") == 1
    assert value(registry, "relay_runs_total", job="refresh", outcome="failed") == 0
    assert value(registry, "relay_run_start_delay_seconds_count", job="refresh") == 1
    assert value(registry, "relay_run_start_delay_seconds_sum", job="refresh") == 0.3
    assert value(registry, "relay_run_start_delay_seconds_bucket", job="refresh", le="0.25") == 0
    assert value(registry, "relay_run_start_delay_seconds_bucket", job="refresh", le="0.5") == 1
    labels = {"job": "refresh", "outcome": "succeeded"}
    assert value(registry, "relay_run_duration_seconds_sum", **labels) == 2.0
    assert value(registry, "relay_live_leases") == 0
    last = value(registry, "relay_last_success_timestamp_seconds", job="refresh")
    assert before <= last <= time.time()


def test_failed_attempts_count_each_and_the_run_only_when_final(
    bus: EventBus, registry: CollectorRegistry
) -> None:
    bus.emit(event(RunStarted, token=1))
    bus.emit(event(RunFailed, token=1, error="boom", duration=1.5, max_attempts=2))
    assert value(registry, "relay_attempts_failed_total", job="refresh") == 1
    assert value(registry, "relay_runs_total", job="refresh", outcome="failed") == 0
    bus.emit(event(RunStarted, token=2, attempt=2))
    bus.emit(event(RunFailed, token=2, attempt=2, max_attempts=2, final=True, duration=0.5))

    assert value(registry, "relay_attempts_failed_total", job="refresh") == 2
    assert value(registry, "relay_runs_total", job="refresh", outcome="failed") == 1
    labels = {"job": "refresh", "outcome": "failed"}
    assert value(registry, "relay_run_duration_seconds_count", **labels) == 2
    assert value(registry, "relay_run_duration_seconds_sum", **labels) == 2.0
    assert value(registry, "relay_live_leases") == 0


def test_exhausted_skipped_missed_takeovers_fences_and_store_outages(
    bus: EventBus, registry: CollectorRegistry
) -> None:
    bus.emit(event(RunExhausted, job="a", max_attempts=3))
    bus.emit(event(RunSkipped, job="a", reason="overlap"))
    bus.emit(event(RunSkipped, job="a", reason="overlap"))
    bus.emit(event(RunSkipped, job="b", reason="stale"))
    bus.emit(RunsMissed(job="b", count=5, first=SLOT, last=SLOT, owner="o"))
    bus.emit(event(RunTakenOver, job="a", previous_owner="dead", previous_attempt=1))
    bus.emit(event(FencedOff, job="a", operation="heartbeat"))
    bus.emit(event(FencedOff, job="a", operation="finish"))
    bus.emit(event(FencedOff, job="a", operation="finish"))
    bus.emit(StoreUnavailable(backend="sqlite", owner="o", error="locked", retry_in=1.0))

    assert value(registry, "relay_runs_total", job="a", outcome="exhausted") == 1
    assert value(registry, "relay_runs_skipped_total", job="a", reason="overlap") == 2
    assert value(registry, "relay_runs_skipped_total", job="b", reason="stale") == 1
    assert value(registry, "relay_runs_skipped_total", job="b", reason="missed") == 5
    assert value(registry, "relay_takeovers_total", job="a") == 1
    assert value(registry, "relay_fenced_off_total", job="a", operation="heartbeat") == 1
    assert value(registry, "relay_fenced_off_total", job="a", operation="finish") == 2
    assert value(registry, "relay_store_unavailable_total") == 1


def test_live_leases_follow_only_runs_started_in_this_process(
    bus: EventBus, registry: CollectorRegistry
) -> None:
    bus.emit(event(RunHandedOver, token=1))  # a beat handing back a run it never started
    assert value(registry, "relay_live_leases") == 0
    bus.emit(event(RunStarted, token=2))
    bus.emit(event(RunStarted, token=2))  # reported twice: still one lease
    bus.emit(event(RunStarted, job="other", token=3))
    assert value(registry, "relay_live_leases") == 2
    bus.emit(event(FencedOff, token=2, operation="heartbeat"))  # no longer ours
    assert value(registry, "relay_live_leases") == 1
    bus.emit(event(FencedOff, token=2, operation="finish"))  # the same lease: nothing more
    bus.emit(event(RunHandedOver, job="other", token=3))
    assert value(registry, "relay_live_leases") == 0


def test_a_run_whose_end_the_store_could_not_record_is_counted_and_held_no_more(
    bus: EventBus, registry: CollectorRegistry
) -> None:
    bus.emit(event(RunStarted, token=1))
    bus.emit(event(RunAbandoned, token=1, operation="finish", outcome="succeeded", lease=30.0))
    assert value(registry, "relay_live_leases") == 0
    assert value(registry, "relay_runs_abandoned_total", job="refresh", operation="finish") == 1
    assert value(registry, "relay_runs_total", job="refresh", outcome="succeeded") == 0


def test_a_run_let_go_is_counted_and_held_no_more_until_its_finish_lands(
    bus: EventBus, registry: CollectorRegistry
) -> None:
    bus.emit(event(RunStarted, token=1))
    bus.emit(event(RunLeaseLost, token=1, error="timeout", silent_for=31.0, lease=30.0))
    assert value(registry, "relay_live_leases") == 0
    assert value(registry, "relay_leases_lost_total", job="refresh") == 1
    bus.emit(event(RunSucceeded, token=1, duration=40.0))  # recorded: nobody took it over
    assert value(registry, "relay_live_leases") == 0
    assert value(registry, "relay_runs_total", job="refresh", outcome="succeeded") == 1


def test_instrumenting_twice_shares_the_metrics_and_detach_stops_counting(
    registry: CollectorRegistry,
) -> None:
    one, two = EventBus(), EventBus()
    first = metrics.instrument(one, registry)
    metrics.instrument(two, registry)
    one.emit(event(RunTakenOver))
    two.emit(event(RunTakenOver))
    assert value(registry, "relay_takeovers_total", job="refresh") == 2
    first.detach()
    one.emit(event(RunTakenOver))
    assert value(registry, "relay_takeovers_total", job="refresh") == 2


def test_serve_exposes_the_registry_over_http(bus: EventBus, registry: CollectorRegistry) -> None:
    bus.emit(event(RunSkipped, reason="paused"))
    server = metrics.serve(0, addr="127.0.0.1", registry=registry)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert 'relay_runs_skipped_total{job="refresh",reason="paused"} 1.0' in text


def test_without_prometheus_client_it_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, registry: CollectorRegistry
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    expected = r"relay.metrics needs the 'prometheus-client' package: .*relay-scheduler\[metrics\]"
    with pytest.raises(MissingDependency, match=expected):
        metrics.instrument(EventBus(), registry)


def test_queued_events_are_counted_within_a_second_without_a_scrape(
    bus: EventBus, registry: CollectorRegistry
) -> None:
    from relay._prometheus import FLUSH_EVERY

    bus.emit(event(RunTakenOver, job="unscraped"))
    child = metrics._by_registry[registry].child  # read the value without a scrape
    takeovers = metrics._by_registry[registry].takeovers
    deadline = time.monotonic() + 10 * FLUSH_EVERY
    while child(takeovers, "unscraped")._value.get() != 1:
        assert time.monotonic() < deadline, "the flushing thread never counted the event"
        time.sleep(0.05)

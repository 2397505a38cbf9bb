"""Metrics and spans fed by a real Scheduler's engine on SQLite (events emitted by the engine)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CollectorRegistry

import relay
from relay import metrics, tracing

HOUR = 1_800_000_000.0
"""A Unix time on the hour."""


@pytest.fixture
def scheduler(tmp_path: Path) -> Iterator[relay.Scheduler[relay.LeaseBackend]]:
    backend = relay.open_backend(f"sqlite:///{tmp_path / 'relay.db'}")
    assert isinstance(backend, relay.LeaseBackend)
    # One second after an hourly slot: each hourly job is due once.
    scheduler = relay.Scheduler(backend, lease=30, heartbeat=10, clock=lambda: HOUR + 1.0)
    yield scheduler
    scheduler.shutdown()
    backend.close()
    tracing.uninstrument()


def test_a_scheduler_run_and_a_failed_one_are_counted(
    scheduler: relay.Scheduler[relay.LeaseBackend],
) -> None:
    registry = CollectorRegistry()
    metrics.instrument(scheduler, registry)

    @scheduler.job(every=3600, name="ok")
    def ok(run: relay.Run) -> None:
        pass

    @scheduler.job(every=3600, name="boom", max_attempts=1)
    def boom(run: relay.Run) -> None:
        raise ValueError("boom")

    assert len(scheduler.run_pending()) == 2
    assert scheduler.join(10)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("relay_runs_total", job="ok", outcome="succeeded") == 1
    assert value("relay_runs_total", job="boom", outcome="failed") == 1
    assert value("relay_attempts_failed_total", job="boom") == 1
    assert value("relay_run_start_delay_seconds_count", job="ok") == 1
    assert value("relay_run_start_delay_seconds_sum", job="ok") == 1.0
    assert value("relay_run_duration_seconds_count", job="boom", outcome="failed") == 1
    assert value("relay_live_leases") == 0
    assert scheduler.run_pending() == []  # decided already: nothing more is counted
    assert value("relay_runs_total", job="ok", outcome="succeeded") == 1


def test_a_scheduler_run_is_one_trace_and_its_span_is_current_in_the_handler(
    scheduler: relay.Scheduler[relay.LeaseBackend],
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.instrument(scheduler, provider)
    seen: list[trace.SpanContext] = []

    @scheduler.job(every=3600, name="traced")
    def traced(run: relay.Run) -> None:
        seen.append(trace.get_current_span().get_span_context())

    scheduler.run_pending()
    assert scheduler.join(10)

    spans = {span.name: span for span in exporter.get_finished_spans()}
    publish, run = spans["traced publish"], spans["traced run"]
    assert publish.kind is SpanKind.PRODUCER
    assert run.parent is not None and run.parent.span_id == publish.context.span_id
    assert run.status.status_code is StatusCode.OK
    assert seen == [run.context]

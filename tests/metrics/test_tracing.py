"""relay.tracing: a publish span and a run span per run, joined across a message header."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from relay import tracing
from relay.errors import MissingDependency
from relay.events import (
    EventBus,
    FencedOff,
    RunAbandoned,
    RunDispatched,
    RunFailed,
    RunHandedOver,
    RunLeaseLost,
    RunStarted,
    RunSucceeded,
    RunTakenOver,
    RunWon,
)
from relay.runs import HEADER, Run, run_from_headers, run_to_headers
from tests.metrics.events import SLOT, event, run_fields


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    tracing.uninstrument()


def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    return tracer_provider


def the_run(token: int = 7) -> Run:
    f = run_fields(token=token)
    return Run(f["run_id"], "refresh", SLOT, 1, token, f["owner"])


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


def test_a_run_won_and_run_in_one_process_is_one_trace(exporter: InMemorySpanExporter) -> None:
    bus = EventBus()
    tracing.instrument(bus, provider(exporter))
    bus.emit(event(RunWon))
    bus.emit(event(RunDispatched))
    bus.emit(event(RunStarted, start_delay=0.2))
    current = trace.get_current_span()
    bus.emit(event(RunSucceeded, duration=1.0))

    spans = by_name(exporter)
    publish, run = spans["refresh publish"], spans["refresh run"]
    assert publish.kind is SpanKind.PRODUCER and run.kind is SpanKind.CONSUMER
    assert run.parent is not None and run.parent.span_id == publish.context.span_id
    assert run.context.trace_id == publish.context.trace_id
    assert current.get_span_context().span_id == run.context.span_id, "current while running"
    assert not trace.get_current_span().get_span_context().is_valid, "detached after the run"
    assert run.status.status_code is StatusCode.OK
    assert run.attributes is not None
    assert run.attributes["relay.run_id"] == "refresh@2026-11-30T08:00:00Z"
    assert run.attributes["relay.token"] == 7
    assert run.attributes["relay.start_delay"] == 0.2
    assert run.attributes["relay.outcome"] == "succeeded"


def test_the_trace_crosses_processes_in_the_run_header(exporter: InMemorySpanExporter) -> None:
    beat, worker = EventBus(), EventBus()
    tracing.instrument(beat, provider(exporter))
    beat.emit(event(RunTakenOver, previous_owner="dead", previous_attempt=1))
    header = tracing.message_headers(the_run())
    beat.emit(event(RunDispatched))
    assert run_from_headers(header) == the_run(), "old workers still read the header"
    assert header[tracing.TRACE_KEY]["traceparent"].startswith("00-")

    tracing.instrument(worker, provider(exporter))  # the worker process's own set-up
    assert tracing.run_from_message(header) == the_run()
    worker.emit(event(RunStarted))
    worker.emit(event(RunFailed, error="ValueError: boom", final=False))

    spans = by_name(exporter)
    publish, run = spans["refresh publish"], spans["refresh run"]
    assert run.parent is not None and run.parent.span_id == publish.context.span_id
    assert run.status.status_code is StatusCode.ERROR
    assert run.status.description == "ValueError: boom"


def test_a_run_handed_back_unpublished_ends_its_span_in_error(
    exporter: InMemorySpanExporter,
) -> None:
    bus = EventBus()
    tracing.instrument(bus, provider(exporter))
    bus.emit(event(RunWon))
    bus.emit(event(RunHandedOver))
    (publish,) = exporter.get_finished_spans()
    assert publish.status.status_code is StatusCode.ERROR


def test_a_run_whose_end_the_store_could_not_record_ends_its_span_in_error(
    exporter: InMemorySpanExporter,
) -> None:
    bus = EventBus()
    tracing.instrument(bus, provider(exporter))
    bus.emit(event(RunStarted))
    bus.emit(event(RunAbandoned, operation="finish", outcome="succeeded", error="down"))
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert "could not record" in (span.status.description or "")
    assert not trace.get_current_span().get_span_context().is_valid


def test_a_run_let_go_notes_it_on_its_span_which_ends_with_the_run(
    exporter: InMemorySpanExporter,
) -> None:
    bus = EventBus()
    tracing.instrument(bus, provider(exporter))
    bus.emit(event(RunStarted))
    bus.emit(event(RunLeaseLost, error="timeout", silent_for=31.0, lease=30.0))
    assert exporter.get_finished_spans() == ()
    bus.emit(event(RunSucceeded, duration=40.0))
    (span,) = exporter.get_finished_spans()
    assert [e.name for e in span.events] == ["lease_lost"]


def test_without_tracing_the_header_is_the_plain_run_header() -> None:
    tracing.uninstrument()
    assert tracing.message_headers(the_run()) == run_to_headers(the_run())
    assert tracing.run_from_message({HEADER: 1}) is None
    assert tracing.run_from_message(run_to_headers(the_run())) == the_run()


def test_a_run_whose_lease_was_lost_ends_its_span_and_leaves_no_context_behind(
    exporter: InMemorySpanExporter,
) -> None:
    bus = EventBus()
    tracing.instrument(bus, provider(exporter))
    bus.emit(event(RunStarted, token=1))
    # The heartbeat thread finds the lease gone; nothing more is reported in the run's thread.
    lost = threading.Thread(
        target=bus.emit, args=(event(FencedOff, token=1, operation="heartbeat"),)
    )
    lost.start()
    lost.join()
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    bus.emit(event(RunStarted, token=2))  # the thread's next run
    assert trace.get_current_span().get_span_context().span_id != span.context.span_id
    bus.emit(event(RunSucceeded, token=2))
    assert not trace.get_current_span().get_span_context().is_valid


def test_without_opentelemetry_it_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(MissingDependency, match=r"relay.tracing needs .*relay-scheduler\[otel\]"):
        tracing.instrument(EventBus())

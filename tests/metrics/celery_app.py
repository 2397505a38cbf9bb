"""The integration tests' Celery app, with Relay's metrics and traces on (RELAY_T_SPANS: a file).

Set up where the app is defined, as the docs say: both beat and the worker import it, and the
prefork pool's children inherit the subscriptions. Spans are written to RELAY_T_SPANS as JSON
lines (one exporter per process, appending).
"""

from __future__ import annotations

import json
import os
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

import relay_celery
from relay import metrics, tracing
from tests.celery_integration.app import app, record

__all__ = ["app", "record"]


def _line(span: ReadableSpan) -> str:
    context: Any = span.context
    parent = span.parent
    return (
        json.dumps(
            {
                "name": span.name,
                "trace": f"{context.trace_id:032x}",
                "span": f"{context.span_id:016x}",
                "parent": f"{parent.span_id:016x}" if parent is not None else None,
                "attributes": dict(span.attributes or {}),
                "status": span.status.status_code.name,
                "pid": os.getpid(),
            }
        )
        + "\n"
    )


metrics.instrument(relay_celery.events.bus)
provider = TracerProvider()
spans = open(os.environ["RELAY_T_SPANS"], "a")  # noqa: SIM115 - open for the process's life
provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=spans, formatter=_line)))
tracing.instrument(relay_celery.events.bus, provider)

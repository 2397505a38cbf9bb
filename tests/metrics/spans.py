"""Spans written as JSON lines to a file, so a test can read what real processes traced."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from relay import tracing
from relay.metrics import Subscribable


def _line(span: ReadableSpan) -> str:
    context: Any = span.context
    parent = span.parent
    values = {
        "name": span.name,
        "trace": f"{context.trace_id:032x}",
        "span": f"{context.span_id:016x}",
        "parent": f"{parent.span_id:016x}" if parent is not None else None,
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "pid": os.getpid(),
    }
    return json.dumps(values) + "\n"


def trace_to_file(target: Subscribable, path: str) -> None:
    """Trace ``target``'s runs, appending each ended span to ``path``."""
    provider = TracerProvider()
    out = open(path, "a")  # noqa: SIM115 - open for the process's life
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out, formatter=_line)))
    tracing.instrument(target, provider)


def assert_runs_are_children_of_their_publish(path: Path, job: str, at_least: int) -> None:
    """Each ``<job> run`` span descends from the ``<job> publish`` span of its run, in another
    process, in the same trace."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    publish = {s["attributes"]["relay.run_id"]: s for s in lines if s["name"] == f"{job} publish"}
    runs = [s for s in lines if s["name"] == f"{job} run"]
    assert len(runs) >= at_least, lines
    for span in runs:
        parent = publish[span["attributes"]["relay.run_id"]]
        assert (span["trace"], span["parent"]) == (parent["trace"], parent["span"])
        assert span["pid"] != parent["pid"]

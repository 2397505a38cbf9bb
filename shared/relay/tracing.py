"""OpenTelemetry: a span per run, from the instance that won it to the worker that ran it.

``instrument(scheduler_or_bus)`` subscribes to the engine's events. Where a run is won (or taken
over, or retried), a ``"<job> publish"`` span (kind PRODUCER) starts; it ends when the run is
dispatched. Where the run starts, a ``"<job> run"`` span (kind CONSUMER) starts as its child, is
current while the handler runs (so the handler's own spans nest under it), and ends with the
attempt's outcome. Needs ``pip install 'relay-scheduler[otel]'``, and a tracer provider configured
by the application (the OpenTelemetry SDK and an exporter).

The trace context crosses processes inside the run's own message header: hosts build the header
with :func:`message_headers` and read it with :func:`run_from_message`, which equal
:func:`relay.runs.run_to_headers` / :func:`relay.runs.run_from_headers` when tracing is off.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from relay.errors import MissingDependency
from relay.events import (
    FencedOff,
    RunAbandoned,
    RunDispatched,
    RunEvent,
    RunExhausted,
    RunFailed,
    RunHandedOver,
    RunLeaseLost,
    RunPickedUp,
    RunRetried,
    RunSkipped,
    RunStarted,
    RunSucceeded,
    RunTakenOver,
    RunWon,
    Subscribable,
)
from relay.runs import Run, RunMessage, format_slot, message_from_headers, run_to_headers

__all__ = [
    "TRACE_KEY",
    "RunTracer",
    "instrument",
    "message_headers",
    "read_message",
    "run_from_message",
    "uninstrument",
]

TRACE_KEY = "trace"
"""The key of the run header (``relay_run``) holding the W3C trace context (``traceparent``)."""
MAX_OPEN = 1000
"""Open spans and parents kept per process at most; the oldest are dropped beyond."""

_tracer: RunTracer | None = None
"""The tracer :func:`message_headers` and :func:`run_from_message` use: the last instrumented."""

RunKey = tuple[str, int]


def _otel() -> Any:
    try:
        from opentelemetry import context, propagate, trace
    except ImportError as exc:
        raise MissingDependency("opentelemetry-api", "otel", needed_by="relay.tracing") from exc
    return context, propagate, trace


class _Bounded(OrderedDict[RunKey, Any]):
    """A dict that forgets its oldest entries beyond ``MAX_OPEN`` (runs whose end never came)."""

    def __setitem__(self, key: RunKey, value: Any) -> None:
        super().__setitem__(key, value)
        while len(self) > MAX_OPEN:
            self.popitem(last=False)


class RunTracer:
    """Spans of runs for one tracer; holds what is open between two events of a run."""

    def __init__(self, tracer_provider: Any = None) -> None:
        self._context, self._propagate, trace = _otel()
        self._trace = trace
        self.tracer = trace.get_tracer("relay", tracer_provider=tracer_provider)
        self._lock = threading.Lock()
        self._publishing: _Bounded = _Bounded()  # run -> its open publish span
        self._parents: _Bounded = _Bounded()  # run -> the SpanContext its run span descends from
        self._running: _Bounded = _Bounded()  # run -> (its run span, the thread it is current in)
        self._attached: dict[int, Any] = {}  # thread id -> the context token of its run span
        self._handlers = self._by_type()

    # -- the deciding side ------------------------------------------------------------------

    def won(self, e: RunEvent) -> None:
        """Start the publish span of a run this instance will dispatch."""
        kind = self._trace.SpanKind.PRODUCER
        span = self.tracer.start_span(f"{e.job} publish", kind=kind, attributes=_attributes(e))
        key = (e.run_id, e.token)
        with self._lock:
            self._publishing[key] = span
            # The parent of the run span if the run starts in this process (standalone).
            self._parents[key] = span.get_span_context()

    def dispatched(self, e: RunEvent) -> None:
        """End the publish span: the run is on its way."""
        with self._lock:
            span = self._publishing.pop((e.run_id, e.token), None)
        if span is not None:
            span.end()

    def inject(self, run: Run, carrier: dict[str, Any]) -> None:
        """Write the trace context of ``run``'s publish span (or the current one) into carrier."""
        with self._lock:
            span = self._publishing.get((run.id, run.token))
        ctx = self._trace.set_span_in_context(span) if span is not None else None
        self._propagate.inject(carrier, context=ctx)

    # -- the running side -------------------------------------------------------------------

    def receive(self, run: Run, carrier: Mapping[str, Any]) -> None:
        """Remember the trace context a run's message carried, for its run span."""
        parent = self._trace.get_current_span(self._propagate.extract(carrier))
        if parent.get_span_context().is_valid:
            with self._lock:
                self._parents[(run.id, run.token)] = parent.get_span_context()

    def started(self, e: RunStarted) -> None:
        """Start the run span, child of the publish span, and make it current in this thread."""
        key = (e.run_id, e.token)
        with self._lock:
            found = self._parents.pop(key, None)
        parent = None
        if found is not None:
            parent = self._trace.set_span_in_context(self._trace.NonRecordingSpan(found))
        attributes = {**_attributes(e), "relay.start_delay": e.start_delay}
        span = self.tracer.start_span(
            f"{e.job} run", context=parent, kind=self._trace.SpanKind.CONSUMER,
            attributes=attributes,
        )  # fmt: skip
        thread = threading.get_ident()
        with self._lock:
            stale = self._attached.pop(thread, None)
        if stale is not None:  # a run whose end was never reported in this thread (lease lost)
            self._context.detach(stale)
        token = self._context.attach(self._trace.set_span_in_context(span))
        with self._lock:
            self._running[key] = (span, thread)
            self._attached[thread] = token

    def ended(self, e: RunEvent, error: str | None = None) -> None:
        """End the run span with the attempt's outcome (``error``: it failed or was refused)."""
        with self._lock:
            entry = self._running.pop((e.run_id, e.token), None)
        if entry is None:
            return
        span, thread = entry
        span.set_attribute("relay.outcome", e.type)
        status = self._trace.StatusCode.ERROR if error else self._trace.StatusCode.OK
        span.set_status(self._trace.Status(status, error))
        span.end()
        if thread == threading.get_ident():
            with self._lock:
                token = self._attached.pop(thread, None)
            if token is not None:
                self._context.detach(token)

    def note(self, e: RunEvent, message: str) -> None:
        """Add an event to the run's open span (publish or run), if this process has one."""
        key = (e.run_id, e.token)
        with self._lock:
            entry = self._running.get(key)
            span = entry[0] if entry is not None else self._publishing.get(key)
        if span is not None:
            span.add_event(e.type, {"relay.message": message})

    def __call__(self, event: RunEvent) -> None:
        """Act on one run event (subscribed once, it dispatches on the event's type)."""
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def _by_type(self) -> dict[type[RunEvent], Callable[[Any], None]]:
        return {
            RunWon: self.won,
            RunTakenOver: self.won,
            RunRetried: self.won,
            RunPickedUp: self.won,
            RunDispatched: self.dispatched,
            RunStarted: self.started,
            RunSucceeded: self.ended,
            RunFailed: lambda e: self.ended(e, e.error or "failed"),
            RunHandedOver: self._handed_over,
            FencedOff: self._fenced_off,
            RunAbandoned: lambda e: self.ended(e, e.message()),
            RunLeaseLost: lambda e: self.note(e, e.message()),
            RunSkipped: lambda e: self.note(e, e.message()),
            RunExhausted: lambda e: self.note(e, e.message()),
        }

    def _handed_over(self, e: RunHandedOver) -> None:
        self.ended(e, "handed over")
        with self._lock:
            span = self._publishing.pop((e.run_id, e.token), None)
        if span is not None:  # could not be dispatched: handed back
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, "handed over"))
            span.end()

    def _fenced_off(self, e: FencedOff) -> None:
        self.note(e, e.message())
        if e.operation != "write":  # the store refused the token: the attempt is over
            self.ended(e, e.message())


def _attributes(e: RunEvent) -> dict[str, Any]:
    return {
        "relay.run_id": e.run_id,
        "relay.job": e.job,
        "relay.slot": format_slot(e.slot),
        "relay.attempt": e.attempt,
        "relay.token": e.token,
        "relay.owner": e.owner,
    }


def instrument(target: Subscribable, tracer_provider: Any = None) -> RunTracer:
    """Trace ``target``'s runs with ``tracer_provider`` (default: the global one).

    ``target`` is an :class:`~relay.events.EventBus`, a :class:`~relay.Scheduler` or any other
    object with the same ``on(event_type, callback)``. The returned tracer is also the one the
    hosts' :func:`message_headers` and :func:`run_from_message` use in this process.
    Raises ``MissingDependency`` without opentelemetry-api.
    """
    global _tracer
    tracer = RunTracer(tracer_provider)
    target.on(RunEvent, tracer)
    _tracer = tracer
    return tracer


def uninstrument() -> None:
    """Stop carrying trace context in messages (subscriptions stay with their bus)."""
    global _tracer
    _tracer = None


def message_headers(run: Run, *, max_attempts: int = 0) -> dict[str, Any]:
    """The run header for ``run``'s message: :func:`~relay.runs.run_to_headers`, plus the trace.

    Hosts call it when they publish a won run (Celery beat, the Dramatiq scheduler).
    """
    values: dict[str, Any] = dict(run_to_headers(run, max_attempts=max_attempts))
    tracer = _tracer
    if tracer is not None:
        carrier: dict[str, Any] = {}
        tracer.inject(run, carrier)
        if carrier:
            values[TRACE_KEY] = carrier
    return values


def read_message(values: object) -> RunMessage | None:
    """What a run message's header carries (:func:`~relay.runs.message_from_headers`), noting
    its trace: read once, where the message arrives, and handed on.

    Hosts call it when a worker receives a run message (Celery worker, Dramatiq middleware).
    """
    message = message_from_headers(values)
    tracer = _tracer
    if message is not None and tracer is not None and isinstance(values, dict):
        carrier = values.get(TRACE_KEY)
        if isinstance(carrier, dict):
            tracer.receive(message.run, carrier)
    return message


def run_from_message(values: object) -> Run | None:
    """The run a message header carries, noting its trace (:func:`read_message`'s run)."""
    message = read_message(values)
    return None if message is None else message.run

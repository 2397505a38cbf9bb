"""The integration tests' Celery app, with Relay's metrics and traces on (RELAY_T_SPANS: a file).

Set up where the app is defined, as the docs say: both beat and the worker import it, and the
prefork pool's children inherit the subscriptions.
"""

from __future__ import annotations

import os

from celery.signals import worker_process_shutdown

import relay_celery
from relay import metrics
from tests.celery_integration.app import app, record
from tests.metrics.spans import trace_to_file

__all__ = ["app", "record"]

metrics.instrument(relay_celery.events.bus)


@worker_process_shutdown.connect
def flush_relay_metrics(**_: object) -> None:
    metrics.flush()


trace_to_file(relay_celery.events.bus, os.environ["RELAY_T_SPANS"])

"""The integration tests' Celery app, with Relay's metrics and traces on (RELAY_T_SPANS: a file).

Set up where the app is defined, as the docs say: both beat and the worker import it, and the
prefork pool's children inherit the subscriptions.
"""

from __future__ import annotations

import os

import relay_celery
from relay import metrics
from tests.celery_integration.app import app, record
from tests.metrics.spans import trace_to_file

__all__ = ["app", "record"]

metrics.instrument(relay_celery.events.bus)
trace_to_file(relay_celery.events.bus, os.environ["RELAY_T_SPANS"])

"""mypy accepts every documented target of relay.metrics / relay.tracing.instrument, and no other.

Checked under ``--strict`` by tests/metrics/test_surface.py; the ``type: ignore`` must be needed
(strict warns about an unused one).
"""

from __future__ import annotations

import relay
import relay.metrics
import relay.tracing
import relay_celery
import relay_dramatiq
from relay.events import EventBus

scheduler = relay.Scheduler("sqlite:///relay.db")
relay.metrics.instrument(scheduler)
relay.metrics.instrument(EventBus())
relay.metrics.instrument(relay_celery.events.bus)
relay.metrics.instrument(relay_dramatiq.RelayMiddleware("sqlite:///relay.db"))
relay.tracing.instrument(scheduler)
relay.tracing.instrument(relay_celery.events.bus)
relay.metrics.instrument(object())  # type: ignore[arg-type]

"""The Dramatiq process tests' app, with Relay's metrics and traces on (RELAY_T_SPANS: a file).

``dramatiq tests.metrics.dramatiq_app -p 2 --fork-function relay.metrics:serve_forever`` and
``python -m relay_dramatiq tests.metrics.dramatiq_app``, with PROMETHEUS_MULTIPROC_DIR set.
"""

from __future__ import annotations

import os

import relay_dramatiq
from relay import metrics
from tests.dramatiq.app import broker
from tests.metrics.spans import trace_to_file

(middleware,) = [m for m in broker.middleware if isinstance(m, relay_dramatiq.RelayMiddleware)]
metrics.instrument(middleware)
trace_to_file(middleware, os.environ["RELAY_T_SPANS"])

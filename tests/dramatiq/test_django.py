"""``relay_dramatiq.django.RelayMiddleware``: built from ``settings.RELAY`` with no arguments, as
django_dramatiq instantiates the classes named in ``DRAMATIQ_BROKER["MIDDLEWARE"]``.

Each case runs in a fresh interpreter: Django's settings can be configured once per process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.dramatiq.procs import ROOT

SCRIPT = """
import json, sys
from django.conf import settings
settings.configure(RELAY=json.loads(sys.argv[1]))
from relay.errors import RelayError
from relay_dramatiq.django import RelayMiddleware
try:
    m = RelayMiddleware()
except RelayError as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
else:
    print(json.dumps({"backend": m.backend.capability, "lease": m.lease,
                      "heartbeat": m.heartbeat, "queue_lease": m.queue_lease, "tick": m.tick}))
"""


def middleware_from(relay: dict[str, object]) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(relay)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    value: dict[str, object] = json.loads(result.stdout)
    return value


def test_settings_relay_configures_the_middleware(tmp_path: Path) -> None:
    relay = {"BACKEND": f"sqlite:///{tmp_path}/r.db", "LEASE": 20, "QUEUE_LEASE": 600, "TICK": 2}
    assert middleware_from(relay) == {
        "backend": "lease", "lease": 20.0, "heartbeat": 20 / 3, "queue_lease": 600.0, "tick": 2.0,
    }  # fmt: skip


def test_lease_settings_on_a_claim_backend_are_refused(tmp_path: Path) -> None:
    relay = {"BACKEND": f"sqlite:///{tmp_path}/c.db?strategy=claim", "QUEUE_LEASE": 600}
    result = middleware_from(relay)
    assert result["error"] == "UnsupportedOption" and "queue_lease" in str(result["message"])

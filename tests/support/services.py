"""Which servers the tests can reach, and what to do when one is missing.

Each service has a URL from an environment variable (defaults: this project's CI machine). A test
that needs a missing service is skipped with the reason, except under ``RELAY_REQUIRE_SERVICES=1``
(CI), where it fails instead.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit

import pytest

__all__ = ["SERVICES", "Service", "require"]


@dataclass(frozen=True)
class Service:
    """A server the tests may use."""

    name: str
    env: str
    default: str

    @property
    def url(self) -> str:
        """The URL to reach it: the environment variable's, or the default."""
        return os.environ.get(self.env, self.default)


SERVICES = {
    "postgres": Service(
        "postgres", "RELAY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
    ),
    "redis": Service("redis", "RELAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
    "rabbitmq": Service("rabbitmq", "RELAY_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F"),
    "nats": Service("nats", "RELAY_TEST_NATS_URL", "nats://127.0.0.1:4222"),
}


@cache
def _answers(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 0), timeout=2):
            return True
    except OSError:
        return False


def require(name: str) -> str:
    """Return the service's URL, or skip (fail under ``RELAY_REQUIRE_SERVICES=1``) if it is down."""
    service = SERVICES[name]
    if _answers(service.url):
        return service.url
    reason = f"{name} is not answering at {service.url} (set {service.env} to use another server)"
    if os.environ.get("RELAY_REQUIRE_SERVICES") == "1":
        pytest.fail(f"RELAY_REQUIRE_SERVICES=1 but {reason}", pytrace=False)
    pytest.skip(reason)

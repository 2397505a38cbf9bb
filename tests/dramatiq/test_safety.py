"""Plausible Dramatiq set-up mistakes: each raises a RelayError naming the fix, or is logged.

``relay-dramatiq`` refusing an app is shown on a real process; Django settings are read in a fresh
interpreter per case (Django can be configured once per process).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from relay.errors import ConfigurationError
from relay.jobs import make_job
from relay.retries import foreign_retries
from relay_dramatiq import Periodic, RelayMiddleware, Scheduler, periodic, periodic_actors
from tests.dramatiq.procs import ROOT
from tests.dramatiq.test_cli import cli
from tests.support import services


def test_an_actor_declared_before_the_middleware_is_refused(tmp_path: Path) -> None:
    broker = StubBroker()
    early = dramatiq.actor(broker=broker, actor_name="early")(lambda: None)
    broker.add_middleware(RelayMiddleware(f"sqlite:///{tmp_path / 'relay.db'}"))
    with pytest.raises(ConfigurationError) as caught:
        periodic(every=60)(early)
    message = str(caught.value)
    assert "'early' was declared before the RelayMiddleware was added" in message
    assert "broker.add_middleware(relay_dramatiq.RelayMiddleware(backend=...))" in message
    assert "before declaring actors" in message
    periodic(every=60)(dramatiq.actor(broker=broker, actor_name="late")(lambda: None))


def test_the_scheduler_refuses_a_periodic_its_workers_could_run_without_relay(
    tmp_path: Path,
) -> None:
    middleware = RelayMiddleware(f"sqlite:///{tmp_path / 'relay.db'}")
    elsewhere, late = StubBroker(), StubBroker()
    elsewhere.add_middleware(middleware)
    bare = dramatiq.actor(broker=StubBroker(), actor_name="bare")(lambda: None)
    declared_first = dramatiq.actor(broker=late, actor_name="first")(lambda: None)
    late.add_middleware(middleware)
    cases = [(bare, "not on its broker"), (declared_first, "declared before the RelayMiddleware")]
    for actor, words in cases:
        item = Periodic(
            actor, make_job(middleware.backend, name=actor.actor_name, every=60), middleware
        )
        with pytest.raises(ConfigurationError, match=words) as caught:
            Scheduler([item])
        assert "broker.add_middleware(relay_dramatiq.RelayMiddleware(backend=...))" in str(
            caught.value
        )
    middleware.backend.close()


LATE_MIDDLEWARE_APP = """
import dramatiq
from dramatiq.brokers.stub import StubBroker
import relay_dramatiq

broker = StubBroker()
dramatiq.set_broker(broker)

@dramatiq.actor
def minutely() -> None: ...

# As if in a second module that only the scheduler imports: workers would lack the middleware.
broker.add_middleware(relay_dramatiq.RelayMiddleware("sqlite:///{db}"))
relay_dramatiq.periodic(every=60)(minutely)
"""


def test_relay_dramatiq_refuses_an_app_whose_workers_could_lack_the_middleware(
    tmp_path: Path,
) -> None:
    (tmp_path / "late_app.py").write_text(LATE_MIDDLEWARE_APP.format(db=tmp_path / "relay.db"))
    proc = cli(tmp_path, "late_app")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, out
    assert "'minutely' was declared before the RelayMiddleware was added" in out
    assert "before declaring actors" in out


@pytest.mark.parametrize(
    "url", ["relay.db", "claims.db?strategy=claim"], ids=["sqlite-lease", "sqlite-claim"]
)
def test_sqlite_logs_one_warning(
    tmp_path: Path, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="relay")
    middleware = RelayMiddleware(f"sqlite:///{tmp_path / url}")
    middleware.backend.close()
    warnings = [r.getMessage() for r in caplog.records if "serves one host only" in r.getMessage()]
    assert len(warnings) == 1 and "PostgreSQL, Redis or NATS" in warnings[0]


def test_both_integrations_refuse_framework_retries_with_one_message(tmp_path: Path) -> None:
    broker = StubBroker()
    broker.add_middleware(RelayMiddleware(f"sqlite:///{tmp_path / 'relay.db'}"))
    retried = dramatiq.actor(broker=broker, actor_name="retried", max_retries=3)(lambda: None)
    with pytest.raises(ConfigurationError) as caught:
        periodic(every=60)(retried)
    expected = foreign_retries(
        "periodic actor 'retried'", "max_retries / retry_when", "in @periodic(max_attempts=...)"
    )
    assert str(caught.value) == str(expected)
    assert "but Relay retries its runs itself: drop max_retries / retry_when and set " \
        "max_attempts in @periodic(max_attempts=...) instead" in str(caught.value)  # fmt: skip


DJANGO = """
import json, sys
from django.conf import settings
settings.configure(**json.loads(sys.argv[1]))
from relay.errors import RelayError
from relay_dramatiq.django import RelayMiddleware
try:
    m = RelayMiddleware()
except RelayError as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
else:
    print(json.dumps({"backend": m.backend.name}))
    m.backend.close()
"""


def django_middleware(settings: dict[str, object]) -> dict[str, str]:
    result = subprocess.run(
        [sys.executable, "-c", DJANGO, json.dumps(settings)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    value: dict[str, str] = json.loads(result.stdout)
    return value


RABBIT = {"BROKER": "dramatiq.brokers.rabbitmq.RabbitmqBroker", "OPTIONS": {"url": "amqp://x"}}


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        (
            {"RELAY": {"BAKEND": "sqlite:///x.db"}},
            ["settings.RELAY has unknown key(s) BAKEND (did you mean BACKEND?)"],
        ),
        ({"RELAY": {}}, ["Relay has no backend", "set RELAY['BACKEND']", "unset"]),
        (
            {"RELAY": {"LEASE": 30}, "DRAMATIQ_BROKER": RABBIT},
            ["Relay has no backend", "set RELAY['BACKEND']", "RabbitmqBroker"],
        ),
    ],
    ids=["misspelled-key", "no-backend-no-broker", "no-backend-rabbitmq-broker"],
)
def test_django_settings_mistakes_are_refused(
    settings: dict[str, object], words: list[str]
) -> None:
    result = django_middleware(settings)
    assert result.get("error") == "ConfigurationError", result
    for word in words:
        assert word in result["message"]


@pytest.mark.redis
def test_django_without_a_backend_decides_on_a_redis_broker() -> None:
    url = services.require("redis")
    broker = {"BROKER": "dramatiq.brokers.redis.RedisBroker", "OPTIONS": {"url": url}}
    result = django_middleware({"RELAY": {}, "DRAMATIQ_BROKER": broker})
    assert result.get("backend", "").startswith("Redis ("), result


def test_the_dramatiq_tick_has_the_core_floor(tmp_path: Path) -> None:
    """`tick` below 0.01 s is refused by the middleware and by the scheduler, as by the core."""
    with pytest.raises(ConfigurationError, match=r"0\.01s floor"):
        RelayMiddleware(f"sqlite:///{tmp_path / 'relay.db'}", tick=0.001)
    broker = StubBroker()
    broker.add_middleware(RelayMiddleware(f"sqlite:///{tmp_path / 'relay.db'}"))

    @periodic(every=60)
    @dramatiq.actor(broker=broker)
    def tick_floor() -> None: ...

    with pytest.raises(ConfigurationError, match=r"0\.01s floor"):
        Scheduler([p for p in periodic_actors() if p.job.name == "tick_floor"], tick=0.001)

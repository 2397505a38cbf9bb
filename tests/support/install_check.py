"""Run in a fresh venv after a documented ``pip install``: does the set-up it promises work?

``python install_check.py EXTRA…``; server URLs come from ``RELAY_TEST_*_URL`` (the suite's
services). Only the standard library and what the install brought may be imported here.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Any

EVERYTHING = {
    "redis", "postgres", "rabbitmq", "nats", "celery", "dramatiq", "django", "metrics", "otel",
    "console", "sentry",
}  # fmt: skip
REDIS = os.environ.get("RELAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
AMQP = os.environ.get("RELAY_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
POSTGRES = os.environ.get("RELAY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
TMP = Path(tempfile.mkdtemp())


def check_core() -> None:
    import relay

    relay.Scheduler(f"sqlite:///{TMP / 'relay.db'}").backend.close()


def check_sqlite() -> None:
    """The embedded store needs nothing beyond the core (checked by :func:`check_core`)."""


def check_redis() -> None:
    import relay

    relay.open_backend(f"{REDIS}?prefix=relay_install_{secrets.token_hex(4)}:").close()


def check_postgres() -> None:
    """The driver reaches the server, and the wheel holds the schema: a fresh one is created."""
    import psycopg

    import relay

    schema = f"relay_install_{secrets.token_hex(4)}"
    url = f"{POSTGRES}{'&' if '?' in POSTGRES else '?'}schema={schema}"
    with psycopg.connect(POSTGRES, connect_timeout=10, autocommit=True) as conn:
        try:
            relay.open_backend(url).close()
        finally:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def check_rabbitmq() -> None:
    import pika

    pika.BlockingConnection(pika.URLParameters(AMQP)).close()


def check_nats() -> None:
    import nats  # noqa: F401


def check_celery() -> None:
    """A Celery app with Relay, on a Redis broker and on a RabbitMQ broker (kombu's transports)."""
    from celery import Celery

    import relay_celery

    for broker in (REDIS, AMQP.replace("/%2F", "//")):
        app = Celery("install_check", broker=broker)
        app.conf.beat_scheduler = "relay_celery.RelayScheduler"
        app.conf.relay_backend = f"sqlite:///{TMP / 'celery.db'}"
        app.conf.beat_schedule = {"tick": {"task": "install_check.tick", "schedule": 60.0}}
        relay_celery.install(app)
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1)
        relay_celery.RelayScheduler(app).close()


def check_dramatiq() -> None:
    """Relay's middleware on a Redis broker and on a RabbitMQ broker."""
    import dramatiq
    from dramatiq.brokers.rabbitmq import RabbitmqBroker
    from dramatiq.brokers.redis import RedisBroker

    import relay_dramatiq

    redis_broker = RedisBroker(url=REDIS)
    redis_broker.client.ping()
    rabbit = RabbitmqBroker(url=AMQP)
    assert rabbit.connection.is_open
    rabbit.close()
    redis_broker.add_middleware(relay_dramatiq.RelayMiddleware(f"sqlite:///{TMP / 'dq.db'}"))
    dramatiq.set_broker(redis_broker)

    @relay_dramatiq.periodic(every=60)
    @dramatiq.actor
    def tick() -> None: ...

    assert [p.job.name for p in relay_dramatiq.periodic_actors()] == ["tick"]


def check_django() -> None:
    import django  # noqa: F401


def check_docs() -> None:
    import material  # noqa: F401
    import mkdocs  # noqa: F401
    import mkdocstrings_handlers.python  # noqa: F401


def check_test() -> None:
    import hypothesis  # noqa: F401
    import pytest  # noqa: F401
    import xdist  # noqa: F401  (the suite runs with -n auto)


def check_testing() -> None:
    """pytest, with Relay's plugin registered: a test using ``relay_clock`` runs an hour of a
    five-minute job in fake time."""
    import subprocess

    (TMP / "test_kit.py").write_text(
        "import relay\n"
        "from relay.testing import runs_of\n\n"
        "def test_an_hour(relay_clock, relay_scheduler):\n"
        "    relay_scheduler.job(cron='*/5 * * * *', name='tick')(lambda run: None)\n"
        "    relay_clock.advance(hours=1)\n"
        "    assert len(runs_of('tick')) == 13\n"
    )
    # An ini file of its own: pytest would otherwise take any pyproject.toml above the folder.
    (TMP / "pytest.ini").write_text("[pytest]\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_kit.py"],
        cwd=TMP, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def check_yaml() -> None:
    """A YAML file of schedules applied to a fresh store (``relay schedules apply``'s path)."""
    import relay
    from relay import schedule_files

    url = f"sqlite:///{TMP / 'schedules.db'}"
    relay.Scheduler(url).backend.close()  # creates the store
    (TMP / "schedules.yaml").write_text(
        "schedules:\n  - name: cleanup\n    task: cleanup\n    every: 3600\n"
        "    kwargs: {older_than_days: 7}\n"
    )
    items = schedule_files.load(TMP / "schedules.yaml")
    control = relay.Control(url)
    schedule_files.apply(control, schedule_files.plan(control, items), force=True)
    assert [s.name for s in control.schedules()] == ["cleanup"]
    control.close()


def check_metrics() -> None:
    """Metrics counted from a real scheduler's events and exposed over HTTP (text format)."""
    import urllib.request

    import relay
    import relay.metrics

    scheduler = relay.Scheduler(f"sqlite:///{TMP / 'metrics.db'}")
    relay.metrics.instrument(scheduler)
    server = relay.metrics.serve(0, addr="127.0.0.1")
    port = server.server_address[1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        assert b"relay_runs_total" in answer.read()
    server.shutdown()
    scheduler.backend.close()


def check_otel() -> None:
    """Tracing needs only the OpenTelemetry API (a no-op tracer until an SDK is configured)."""
    import relay
    import relay.tracing

    scheduler = relay.Scheduler(f"sqlite:///{TMP / 'otel.db'}")
    relay.tracing.instrument(scheduler)
    scheduler.backend.close()


def check_console() -> None:
    """The web console answers its jobs page over ASGI and over WSGI (a2wsgi), from loopback."""
    import asyncio
    import io

    import relay
    from relay.console import asgi_app, wsgi_app

    url = f"sqlite:///{TMP / 'console.db'}"
    relay.Scheduler(url).backend.close()  # creates the store
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "method": "GET", "path": "/", "raw_path": b"/", "query_string": b"",
        "headers": [], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "scheme": "http",
        "root_path": "", "http_version": "1.1",
    }  # fmt: skip
    asyncio.run(asgi_app(url)(scope, receive, send))
    assert sent[0]["status"] == 200, sent
    environ = {
        "REQUEST_METHOD": "GET", "PATH_INFO": "/", "QUERY_STRING": "", "SERVER_NAME": "x",
        "SERVER_PORT": "80", "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "5",
        "wsgi.input": io.BytesIO(), "wsgi.url_scheme": "http", "wsgi.errors": io.StringIO(),
    }  # fmt: skip
    statuses: list[str] = []
    body = b"".join(wsgi_app(url)(environ, lambda status, headers, *a: statuses.append(status)))
    assert statuses[0].startswith("200") and b"Jobs" in body, (statuses, body[:200])


def _one_run_of(path: str) -> Any:
    """A scheduler on a fresh SQLite store with one five-minute job ``refresh``, its clock
    stopped at the start of a slot (so that ``run_pending`` runs it)."""
    import time

    import relay
    from relay.backends.sqlite import SQLiteLeaseBackend

    slot = time.time() // 300 * 300
    store = SQLiteLeaseBackend(TMP / path, clock=lambda: slot)
    scheduler = relay.Scheduler(store, lease=30, heartbeat=10, clock=lambda: slot)
    scheduler.job(every=300, name="refresh")(lambda run: None)
    return scheduler


def check_healthchecks() -> None:
    """The Healthchecks monitor, with no dependency of its own: a job registered as a check over
    HTTP (a stand-in on loopback answering the management API) and pinged at its run's start and
    success."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from relay.monitors.healthchecks import Healthchecks

    seen: list[tuple[str, str]] = []

    class Service(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append((self.path, self.headers.get("X-Api-Key") or ""))
            answer = b""
            if self.path == "/api/v3/checks/":
                name = json.loads(body)["name"]
                answer = json.dumps({"ping_url": f"{base}/ping/{name}"}).encode()
            self.send_response(201 if answer else 200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Service)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    scheduler = _one_run_of("healthchecks.db")
    monitor = Healthchecks(api_key="install-check", api_url=base)
    assert monitor.register(scheduler.jobs.values()) == {"refresh": f"{base}/ping/refresh"}
    monitor.send_pings(scheduler.on)
    scheduler.run_pending()
    assert scheduler.join(30) and monitor.flush(30)
    paths = [path.split("?")[0] for path, _ in seen]
    assert paths == ["/api/v3/checks/", "/ping/refresh/start", "/ping/refresh"], seen
    assert seen[0][1] == "install-check", seen
    server.shutdown()
    scheduler.backend.close()


def check_sentry() -> None:
    """Sentry Crons through sentry-sdk: a run's ``in_progress`` and ``ok`` check-ins, the first
    carrying the job's monitor configuration (kept by a transport instead of sent)."""
    import sentry_sdk
    from sentry_sdk.envelope import Envelope
    from sentry_sdk.transport import Transport

    from relay.monitors.sentry import send_checkins

    checkins: list[dict[str, Any]] = []

    class Recording(Transport):
        def capture_envelope(self, envelope: Envelope) -> None:
            checkins.extend(i.payload.json or {} for i in envelope.items if i.type == "check_in")

    sentry_sdk.init(
        dsn="https://key@sentry.invalid/1", transport=Recording(), default_integrations=False
    )
    scheduler = _one_run_of("sentry.db")
    send_checkins(scheduler.on, scheduler.jobs.values())
    scheduler.run_pending()
    assert scheduler.join(30)
    sentry_sdk.get_client().close()
    assert [(c["monitor_slug"], c["status"]) for c in checkins] == [
        ("refresh", "in_progress"), ("refresh", "ok"),
    ], checkins  # fmt: skip
    assert checkins[0]["monitor_config"]["schedule"]["unit"] == "minute", checkins
    scheduler.backend.close()


def check_bench() -> None:
    """The benchmarks' own dependency: celery-redbeat, beside Celery and the stores' drivers."""
    import redbeat  # noqa: F401

    check_celery()
    check_redis()


def expand(extras: list[str]) -> list[str]:
    """``all`` and ``dev`` stand for the extras they pull in."""
    found: set[str] = set()
    for extra in extras:
        if extra in ("all", "dev"):
            found |= EVERYTHING
        if extra == "dev":
            found |= {"docs", "test"}
        if extra == "postgres-binary":
            found.add("postgres")
        found.add(extra)
    return sorted(found - {"all", "dev", "postgres-binary"})


def main(extras: list[str]) -> None:
    """Run the core check, then one per extra."""
    check_core()
    for extra in expand(extras):
        globals()[f"check_{extra.replace('-', '_')}"]()
        print(f"{extra}: ok")


if __name__ == "__main__":
    main(sys.argv[1:])

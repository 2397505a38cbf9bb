"""Local fakes of the monitoring services' HTTP APIs, on loopback, for :mod:`relay.monitors`.

They implement the request shapes the services document, and refuse what the services refuse:

* Healthchecks (https://healthchecks.io/docs/api/, /docs/http_api/): ``POST /api/v3/checks/``
  with the project's key in ``X-Api-Key`` and a JSON check (``name``, ``grace`` and ``timeout``
  of at least 60 s, or a ``schedule`` with its ``tz``; ``unique`` makes it an upsert: 201 when
  created, 200 when an existing check was updated), answered with the check and its
  ``ping_url``; ``GET /api/v3/checks/`` (``tag`` filters) lists them; pings to
  ``/ping/<uuid>``, ``/ping/<uuid>/start`` and ``/ping/<uuid>/fail``, with an optional ``rid``.
  :meth:`FakeHealthchecks.status` says what the service would show at a given time: ``down``
  once a ping is later than its period plus grace, as Healthchecks does.
* Sentry (https://develop.sentry.dev/sdk/envelopes/, /sdk/check-ins/): envelopes ``POST``-ed to
  ``/api/<project>/envelope/``, whose ``check_in`` items are kept.
"""

from __future__ import annotations

import gzip
import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from relay.schedules import CronSchedule

UTC = timezone.utc
API_KEY = "fake-project-key"


@dataclass
class Check:
    """One Healthchecks check and the pings it received, with when (the server's clock)."""

    uuid: str
    body: dict[str, Any]
    pings: list[tuple[str, str | None, datetime]] = field(default_factory=list)


class FakeHealthchecks:
    """The checks and pings a fake Healthchecks received."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.checks: dict[str, Check] = {}
        self.lock = threading.Lock()

    def upsert(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        problem = _invalid(body)
        if problem:
            return 400, {"error": problem}
        with self.lock:
            found = self.checks.get(body["name"]) if "name" in body.get("unique", []) else None
            status = 200 if found else 201
            if found is None:
                found = self.checks[body["name"]] = Check(str(uuid.uuid4()), {})
            found.body = {k: v for k, v in body.items() if k != "unique"}
        return status, {**found.body, "ping_url": f"{self.base}/ping/{found.uuid}"}

    def listed(self, tag: str | None) -> list[dict[str, Any]]:
        """The checks, those with ``tag`` among their space-separated tags if given."""
        with self.lock:
            return [
                {**c.body, "ping_url": f"{self.base}/ping/{c.uuid}"}
                for c in self.checks.values()
                if tag is None or tag in str(c.body.get("tags", "")).split()
            ]

    def ping(self, check_uuid: str, kind: str, rid: str | None) -> bool:
        with self.lock:
            for check in self.checks.values():
                if check.uuid == check_uuid:
                    check.pings.append((kind, rid, datetime.now(UTC)))
                    return True
        return False

    def status(self, name: str, at: datetime) -> str:
        """``new``, ``up`` or ``down`` at ``at``, from the check's last ping."""
        check = self.checks[name]
        finished = [p for p in check.pings if p[0] != "start"]
        if not finished:
            return "new"
        kind, _, last = finished[-1]
        if kind == "fail":
            return "down"
        body = check.body
        if "schedule" in body:
            schedule = CronSchedule(body["schedule"], body.get("tz", "UTC"))
            due = next(iter(schedule.slots_between(last, last + timedelta(days=400))))
        else:
            due = last + timedelta(seconds=body["timeout"])
        return "down" if at > due + timedelta(seconds=body["grace"]) else "up"


def _invalid(body: dict[str, Any]) -> str:
    if not isinstance(body.get("name"), str):
        return "name must be a string"
    if not isinstance(body.get("grace"), int) or body["grace"] < 60:
        return "grace must be an integer of at least 60 seconds"
    if "schedule" in body:
        if not isinstance(body.get("tz"), str):
            return "a schedule needs its tz"
    elif not isinstance(body.get("timeout"), int) or body["timeout"] < 60:
        return "timeout must be an integer of at least 60 seconds"
    return ""


class FakeSentry:
    """The check-ins a fake Sentry received."""

    def __init__(self) -> None:
        self.checkins: list[dict[str, Any]] = []

    def envelope(self, data: bytes) -> None:
        lines = data.split(b"\n")
        index = 1  # the first line is the envelope's header
        while index < len(lines) and lines[index].strip():
            header = json.loads(lines[index])
            length = header.get("length")
            if length is not None:
                rest = b"\n".join(lines[index + 1 :])
                payload, rest = rest[:length], rest[length + 1 :]
                lines = [*lines[: index + 1], *rest.split(b"\n")]
            else:
                payload = lines[index + 1]
            if header.get("type") == "check_in":
                self.checkins.append(json.loads(payload))
            index += 2


@dataclass
class FakeServices:
    """Both fakes behind one loopback server."""

    url: str
    healthchecks: FakeHealthchecks
    sentry: FakeSentry


@contextmanager
def fake_services() -> Iterator[FakeServices]:
    """Serve both fakes on 127.0.0.1 (a free port) until the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    services = FakeServices(url, FakeHealthchecks(url), FakeSentry())
    server.services = services  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield services
    finally:
        server.shutdown()
        server.server_close()


def _decoded(body: bytes, encoding: str | None) -> bytes:
    """An envelope as the SDK compressed it (gzip, or Brotli when installed)."""
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "br":
        import brotli  # type: ignore[import-not-found, unused-ignore]

        return brotli.decompress(body)  # type: ignore[no-any-return, unused-ignore]
    return body


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    @property
    def services(self) -> FakeServices:
        return self.server.services  # type: ignore[attr-defined,no-any-return]

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/api/v3/checks/":
            if self.headers.get("X-Api-Key") != API_KEY:
                return self._answer(401, {"error": "wrong api key"})
            tag = parse_qs(url.query).get("tag", [None])[0]
            return self._answer(200, {"checks": self.services.healthchecks.listed(tag)})
        self._ping()

    def do_HEAD(self) -> None:
        self._ping()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = urlparse(self.path).path
        if path == "/api/v3/checks/":
            if self.headers.get("X-Api-Key") != API_KEY:
                return self._answer(401, {"error": "wrong api key"})
            return self._answer(*self.services.healthchecks.upsert(json.loads(body)))
        if path.startswith("/api/") and path.endswith("/envelope/"):
            self.services.sentry.envelope(_decoded(body, self.headers.get("Content-Encoding")))
            return self._answer(200, {})
        self._ping()

    def _ping(self) -> None:
        url = urlparse(self.path)
        parts = url.path.strip("/").split("/")
        if len(parts) < 2 or parts[0] != "ping":
            return self._answer(404, {"error": "not found"})
        kind = parts[2] if len(parts) > 2 else "success"
        rid = parse_qs(url.query).get("rid", [None])[0]
        found = self.services.healthchecks.ping(parts[1], kind, rid)
        self._answer(200 if found else 404, {})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

"""Healthchecks.io checks for Relay's jobs: registered with their schedule and grace, pinged when
each run starts, succeeds or fails for good.

::

    from relay.monitors.healthchecks import Healthchecks

    monitor = Healthchecks(api_key="…")            # a project's API key (read-write)
    monitor.register(scheduler.jobs.values())      # once, where the jobs are declared
    monitor.send_pings(scheduler.on)               # where the runs run

:meth:`Healthchecks.register` creates or updates one check per job through the management API
(``POST /api/v3/checks/`` with ``unique: ["name"]``): the check is named after the job and tagged
``relay``; a cron job gets its ``schedule`` and ``tz``, an interval job its ``timeout``, both the
``grace`` of :func:`relay.monitors.plan`. Pings go to each check's ``ping_url``: ``/start`` when an
attempt starts, the URL itself on success, ``/fail`` when the run fails for good (its last attempt
failed, or died), each with the run's id as ``rid`` so that Healthchecks pairs start and end.

Healthchecks itself then alerts when a ping does not come in time, however the fleet failed. Pings
are sent from a background thread, a few seconds' timeout each: a slow or unreachable service
delays nothing and fails nothing (it is logged).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from relay.errors import BackendUnavailable, ConfigurationError
from relay.events import RunEvent, RunExhausted, RunFailed, RunStarted, RunSucceeded
from relay.jobs import Job
from relay.monitors import plan

__all__ = ["DEFAULT_API", "Healthchecks"]

log = logging.getLogger("relay.monitors")

DEFAULT_API = "https://healthchecks.io"
"""The hosted service; a self-hosted Healthchecks is its own URL."""
TIMEOUT = 5.0
"""Seconds one request to the service may take."""
MIN_GRACE = 60
"""The shortest grace and timeout Healthchecks accepts, in seconds."""

On = Callable[[type[Any], Callable[[Any], object]], Callable[[], None]]


class Healthchecks:
    """One Healthchecks project: registers jobs as checks and pings them."""

    def __init__(self, api_key: str, *, api_url: str = DEFAULT_API, timeout: float = TIMEOUT):
        if not api_key:
            raise ConfigurationError(
                "Healthchecks needs a project's API key (Settings > API Access): api_key='…'"
            )
        self.api_url = api_url.rstrip("/")
        self.timeout = timeout
        self._key = api_key
        self.ping_urls: dict[str, str] = {}
        """Each registered job's ping URL."""
        self._queue: queue.SimpleQueue[tuple[str, str] | threading.Event] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._listed = False

    def register(self, jobs: Iterable[Job]) -> dict[str, str]:
        """Create or update a check per job; return each job's ping URL.

        Raises :class:`~relay.errors.BackendUnavailable` naming the service if it cannot be
        reached or refuses the key.
        """
        for job in jobs:
            answer = self._request("POST", "/api/v3/checks/", _check_of(job))
            self.ping_urls[job.name] = str(answer["ping_url"])
        return dict(self.ping_urls)

    def send_pings(self, on: On) -> Callable[[], None]:
        """Ping each job's check as its runs start and end (``on``: ``scheduler.on``,
        ``relay_celery.on`` or ``RelayMiddleware.on``); returns a function that unsubscribes.

        A process that did not :meth:`register` the jobs (a Celery or Dramatiq worker) finds
        their checks by name, tagged ``relay``, with one ``GET /api/v3/checks/?tag=relay`` at
        its first ping; a run of a job with no check sends nothing.
        """
        offs = [
            on(RunStarted, lambda e: self._ping(e, "/start")),
            on(RunSucceeded, lambda e: self._ping(e, "")),
            on(RunFailed, lambda e: self._ping(e, "/fail") if e.final else None),
            on(RunExhausted, lambda e: self._ping(e, "/fail")),
        ]

        def off() -> None:
            for unsubscribe in offs:
                unsubscribe()

        return off

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until the pings queued so far are sent; ``False`` if ``timeout`` passed first."""
        done = threading.Event()
        self._queue.put(done)
        self._start()
        return done.wait(timeout)

    def _ping(self, event: RunEvent, suffix: str) -> None:
        rid = uuid.uuid5(uuid.NAMESPACE_URL, f"relay:{event.run_id}").hex
        self._queue.put((event.job, f"{suffix}?rid={rid}"))
        self._start()

    def _url(self, job: str) -> str | None:
        """The job's ping URL; the project's checks are listed once if it is not known."""
        if job not in self.ping_urls and not self._listed:
            self._listed = True
            try:
                listed = self._request("GET", "/api/v3/checks/?tag=relay", None)
            except BackendUnavailable as exc:
                log.warning("could not list the Healthchecks checks: %s", exc)
                self._listed = False  # tried again at the next ping
                return None
            for check in listed.get("checks", []):
                self.ping_urls.setdefault(str(check["name"]), str(check["ping_url"]))
        return self.ping_urls.get(job)

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._send_forever, name="relay-healthchecks", daemon=True
            )
            self._thread.start()

    def _send_forever(self) -> None:
        while True:
            item = self._queue.get()
            if isinstance(item, threading.Event):
                item.set()
                continue
            job, tail = item
            base = self._url(job)
            if base is None:
                continue  # a job with no check: another monitor's
            url = base + tail
            try:
                with urllib.request.urlopen(
                    urllib.request.Request(url, method="POST", data=b""), timeout=self.timeout
                ):
                    pass
            except OSError as exc:
                log.warning("could not ping Healthchecks (%s): %s", url.split("?")[0], exc)

    def _request(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        request = urllib.request.Request(
            self.api_url + path, method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"X-Api-Key": self._key, "Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer: dict[str, Any] = json.loads(response.read())
        except OSError as exc:  # URLError and HTTPError are OSErrors
            raise BackendUnavailable(
                f"Healthchecks at {self.api_url} did not register the check ({exc}): check "
                "api_url and that api_key is the project's read-write API key"
            ) from exc
        return answer


def _check_of(job: Job) -> dict[str, Any]:
    seen = plan(job)
    body: dict[str, Any] = {
        "name": job.name, "tags": "relay", "grace": max(MIN_GRACE, seen.grace),
        "unique": ["name"], "desc": f"Relay job {job.name} ({job.schedule.describe()})",
    }  # fmt: skip
    if seen.cron is not None:
        body.update(schedule=seen.cron, tz=seen.tz)
    else:
        body["timeout"] = max(MIN_GRACE, round(seen.every or MIN_GRACE))
    return body

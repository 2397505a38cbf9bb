"""A password in a backend URL appears in no output of a full run.

Each case puts a canary password in the URL of one store (SQLite has none: every other backend,
lease and claim), runs a scheduler on it (a job that succeeds and one that fails), the control
commands and every ``relay`` command that reads (with and without ``--json``), and opens the URL
on a port where nothing listens. It collects each output: the ``relay`` loggers at DEBUG (with
tracebacks and extra fields), every event the hooks receive, Prometheus metrics, the CLI's output
and errors, the timeline page, the refused connection's whole exception chain, and for lease
stores the Django admin pages and system checks. The canary must be in none of them.

The canary is a password (PostgreSQL also as libpq's ``password`` option, NATS also as a token).
The servers accept it: PostgreSQL trusts loopback, the shared Redis's default user and the test
NATS take any password, and RabbitMQ gets a user and vhost of the test's own.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import pytest
from click.testing import CliRunner

import relay
from relay.cli import main
from relay.events import Event
from tests.support.backends import nats_kv_lease, postgres_lease, redis_lease, unique
from tests.support.claim_backends import nats_dedup_claim, redis_claim
from tests.support.ports import free_port
from tests.support.rabbitmq_users import rabbitmq_user

CANARY = "Canary-7f3a9c-pw"
WRONG = f"{CANARY}-wrong"
UrlFactory = Callable[[Path], AbstractContextManager[str]]
PAGES = """
import json
from django.contrib.auth.models import User
from django.test import Client
User.objects.create_superuser("root", "root@example.com", "pw")
client = Client()
client.force_login(User.objects.get(username="root"))
out = {}
for path in ("/admin/relay/job/", "/admin/relay/run/", "/admin/relay/run/timeline/",
             "/admin/relay/job/no-such-job/", "/admin/relay/schedule/",
             "/admin/relay/schedule/no-such-schedule/history/"):
    response = client.get(path)
    out[path] = [response.status_code, response.content.decode()]
print(json.dumps(out))
"""


def _login(url: str, login: str) -> str:
    """``url`` with ``login`` (``user:password`` or a NATS token) before its host."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{login}@{parts.netloc.rpartition('@')[2]}"))


def _canary(factory: UrlFactory, user: str, where: str = "password") -> UrlFactory:
    """``factory``'s URLs with the canary as the password of ``user`` (or of the URL's user),
    as a NATS token (``where="token"``), or as libpq's ``password`` option (``"query"``)."""

    @contextmanager
    def made(tmp_path: Path) -> Iterator[str]:
        with factory(tmp_path) as url:
            if where == "token":
                yield _login(url, CANARY)
            elif where == "query":
                yield f"{url}&password={CANARY}"
            else:
                yield _login(url, f"{urlsplit(url).username or user}:{CANARY}")

    return made


@contextmanager
def _rabbitmq(tmp_path: Path, mode: str | None = None) -> Iterator[str]:
    with rabbitmq_user(CANARY) as made:
        made.allow(None)
        options = {"prefix": unique(), "retention": "120"}
        yield made.url(**({"mode": mode} if mode else {}), **options)


STORES = [
    pytest.param(_canary(postgres_lease, "postgres"), True, marks=pytest.mark.postgres, id="pg"),
    pytest.param(_canary(redis_lease, "default"), True, marks=pytest.mark.redis, id="redis"),
    pytest.param(
        _canary(postgres_lease, "postgres", "query"), True, marks=pytest.mark.postgres, id="pg-q"
    ),
    pytest.param(_canary(nats_kv_lease, "relay"), True, marks=pytest.mark.nats_kv, id="nats-kv"),
    pytest.param(
        _canary(nats_kv_lease, "", "token"), True, marks=pytest.mark.nats_kv, id="nats-token"
    ),
    pytest.param(
        _canary(redis_claim("script"), "default"), False, marks=pytest.mark.redis, id="redis-claim"
    ),
    pytest.param(
        _canary(nats_dedup_claim, "relay"), False, marks=pytest.mark.nats, id="nats-dedup"
    ),
    pytest.param(_rabbitmq, False, marks=pytest.mark.rabbitmq, id="rabbitmq"),
    pytest.param(
        lambda tmp_path: _rabbitmq(tmp_path, "consumer"),
        False,
        marks=pytest.mark.rabbitmq,
        id="rabbitmq-consumer",
    ),
]


class _Captured(logging.Handler):
    """Every record of the ``relay`` loggers, formatted with its traceback and extra fields."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{self.format(record)} {record.__dict__!r}")


@contextmanager
def _relay_logs() -> Iterator[_Captured]:
    logger, handler = logging.getLogger("relay"), _Captured()
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _schedule(url: str, lease: bool) -> tuple[list[str], str]:
    """A scheduler's events (each repr and message) and its Prometheus metrics."""
    from prometheus_client import CollectorRegistry, generate_latest

    from relay.metrics import instrument

    registry = CollectorRegistry()
    options = {"lease": 5, "heartbeat": 1} if lease else {}
    scheduler = relay.Scheduler(url, tick=0.05, **options)  # type: ignore[call-overload]
    events: list[str] = []
    scheduler.on(Event, lambda event: events.append(f"{event!r} {event.message}"))
    instrument(scheduler, registry)
    ran: list[str] = []

    @scheduler.job(every=0.25, name="ok")
    def ok(run: relay.Run) -> None:
        ran.append("ok")

    @scheduler.job(every=0.25, name="fails")
    def fails(run: relay.Run) -> None:
        ran.append("fails")
        raise RuntimeError("boom")

    deadline = time.monotonic() + 20
    while (ran.count("ok") < 2 or ran.count("fails") < 2) and time.monotonic() < deadline:
        scheduler.run_pending()
        time.sleep(0.05)
    scheduler.join(5)
    scheduler.shutdown()
    scheduler.backend.close()  # run() closes the store it opened; run_pending() leaves it open
    assert ran.count("ok") >= 2 and ran.count("fails") >= 2, ran
    return events, generate_latest(registry).decode()


def _commands(url: str, lease: bool, tmp_path: Path) -> dict[str, str]:
    """The output of every ``relay`` command on ``url``, by its command line."""
    runner, page = CliRunner(), tmp_path / "timeline.html"
    lines = [
        ["runs"], ["runs", "--json"], ["runs", "--job", "fails", "--state", "failed"],
        ["instances"], ["instances", "--json"], ["health"], ["health", "--max-age", "60"],
        ["jobs"], ["jobs", "--json"], ["next", "ok"], ["pause", "ok", "--reason", "canary"],
        ["resume", "ok"], ["trigger", "ok"], ["prune", "--older-than", "30d"], ["migrate"],
        ["timeline", "--since", "1h", "--html", str(page)],
    ]  # fmt: skip
    if "doctor" in main.commands:  # its exit status says what it found: not checked here
        lines += [["doctor"], ["doctor", "--json"]]
    outputs, failed = {}, []
    for line in lines:
        done = runner.invoke(main, [*line, "--backend", url])
        outputs[" ".join(line)] = f"{done.output}{done.exception!r}"
        failed += [] if done.exit_code == 0 or line[0] == "doctor" else [line[0]]
    outputs["timeline page"] = page.read_text() if page.exists() else ""
    if lease:  # every command worked: its output is a real one, not an error
        assert not failed, {name: outputs[name] for name in outputs if name.split()[0] in failed}
        assert 'data-job="fails"' in outputs["timeline page"]
    if "mode=consumer" in url:  # the consumers ran the runs: relay runs shows their outcomes
        assert "boom" in outputs["runs --json"], outputs["runs --json"]
    return outputs


def _control(url: str) -> dict[str, str]:
    with relay.Control(url) as control:
        return {
            "Control.jobs": repr(control.jobs()),
            "Control.job": repr(control.job("fails")),
            "Control.trigger": repr(control.trigger("ok")),
        }


def _refused(url: str) -> dict[str, str]:
    """A URL whose port has no server, or with a wrong password: each error's whole chain."""
    parts = urlsplit(url)
    closed = urlunsplit(parts._replace(netloc=parts.netloc.rsplit(":", 1)[0] + f":{free_port()}"))
    outputs = {}
    # A wrong password (the canary, longer): RabbitMQ refuses it; the others take any password.
    for what, bad in (("a closed port", closed), ("a wrong password", url.replace(CANARY, WRONG))):
        try:
            relay.open_backend(bad).close()
            outputs[f"open_backend with {what}"] = "opened"
        except Exception as exc:  # the chain goes to logs and tracebacks: all of it must be clean
            outputs[f"open_backend with {what}"] = "".join(traceback.format_exception(exc))
    done = CliRunner().invoke(main, ["runs", "--backend", closed])
    outputs["relay runs on a closed port"] = f"{done.output}{done.exception!r}"
    return outputs


def _admin(url: str, tmp_path: Path) -> dict[str, str]:
    """The Django admin's pages and system checks with ``url`` as the store."""
    from tests.django_app.support import manage, site_env

    env = site_env(tmp_path / "db.sqlite3", RELAY={"BACKEND": url}, ALLOWED_HOSTS=["*"])
    assert manage(env, "migrate", "-v", "0").returncode == 0
    done = manage(env, "shell", "-c", PAGES)
    assert done.returncode == 0, done.stderr
    pages = json.loads(done.stdout.splitlines()[-1])
    outputs = {f"admin {path}": f"{status} {html}" for path, (status, html) in pages.items()}
    checked = manage(env, "check")
    outputs["manage.py check"] = checked.stdout + checked.stderr
    return outputs


@pytest.mark.slow
@pytest.mark.parametrize(("store", "lease"), STORES)
def test_a_canary_password_appears_in_no_output(
    store: UrlFactory, lease: bool, tmp_path: Path
) -> None:
    with store(tmp_path) as url:
        assert CANARY in url
        outputs: dict[str, str] = {}
        with _relay_logs() as logs:
            events, metrics = _schedule(url, lease)
            outputs |= {f"event {i}": text for i, text in enumerate(events)}
            outputs["metrics"] = metrics
            outputs |= _commands(url, lease, tmp_path)
            if lease:
                outputs |= _control(url)
            outputs |= _refused(url)
        outputs |= {f"log {i}": line for i, line in enumerate(logs.lines)}
        if lease:
            outputs |= _admin(url, tmp_path)
    assert len(events) > 4 and len(logs.lines) > 4
    secrets = (CANARY, quote(CANARY, safe=""))
    leaks = {name: text for name, text in outputs.items() if any(s in text for s in secrets)}
    assert not leaks, f"the canary password shows in {sorted(leaks)}: {next(iter(leaks.values()))}"

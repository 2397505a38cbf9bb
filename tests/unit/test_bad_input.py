"""Every bad input a user can give is a RelayError, raised at once, whose message names the fix.

One row per mistake: what is called, the error expected, and the words of its message that say
why or what to write instead. A new mistake found anywhere gets a row here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import relay
from relay import AcquireRequest, ConfigurationError, InvalidSchedule, RelayError
from relay.backends import open_backend
from relay.fencing import SQLFence, redis_fenced_set
from relay.jobs import check_tick
from relay.runs import format_slot, parse_run_id, slot_ms
from relay.schedules import CronSchedule, make_schedule
from relay.settings import Settings, from_mapping

NAIVE = datetime(2026, 11, 29, 21, 30)
AWARE_FIX = "datetime.now(timezone.utc)"


@dataclass(frozen=True)
class Case:
    """A mistake: ``call`` makes it (given a scratch folder); ``error`` and ``words`` judge it."""

    id: str
    call: Callable[[Path], object]
    error: type[RelayError]
    words: tuple[str, ...]


def lease_db(tmp: Path) -> str:
    return f"sqlite:///{tmp / 'relay.db'}"


def scheduler(tmp: Path, **options: Any) -> relay.Scheduler[Any]:
    return relay.Scheduler(lease_db(tmp), **options)


def job(tmp: Path, handler: object = None, **options: Any) -> object:
    """Schedule ``handler`` (a one-argument function by default) with ``options``."""
    return scheduler(tmp).job(**options)(handler or (lambda run: None))  # type: ignore[arg-type]


def cron(expression: object) -> Callable[[Path], object]:
    return lambda tmp: job(tmp, cron=expression, name="report")


def twice(tmp: Path) -> None:
    s = scheduler(tmp)
    s.job(every=60, name="report")(lambda run: None)
    s.job(cron="0 * * * *", name="report")(lambda run: None)


def dramatiq_middleware(tmp: Path, **options: Any) -> object:
    from relay_dramatiq import RelayMiddleware

    return RelayMiddleware(lease_db(tmp), **options)


def celery_settings(tmp: Path, **options: Any) -> object:
    from relay_celery.config import open_checked

    backend, checked = open_checked(Settings(backend=lease_db(tmp), **options))
    backend.close()
    return checked


def sqlite(tmp: Path, query: str = "") -> Any:
    return open_backend(lease_db(tmp) + query)


CASES = [
    # -- cron: five fields or a nickname, nothing per-instance, croniter's reason passed on -----
    Case(
        "cron-seconds", cron("*/5 * * * * *"), InvalidSchedule, ("six fields", "seconds", "every=")
    ),
    Case(
        "cron-year",
        cron("0 0 * * * * 2030"),
        InvalidSchedule,
        ("seven fields", "year", "five fields"),
    ),
    Case("cron-R", cron("R 3 * * *"), InvalidSchedule, ("random", "once per instance", "Use H")),
    Case("cron-R-range", cron("R(0-29) * * * *"), InvalidSchedule, ("random", "minute", "Use H")),
    Case(
        "cron-minute-61",
        cron("61 * * * *"),
        InvalidSchedule,
        ("minute field '61' is out of range", "0-59"),
    ),
    Case(
        "cron-hour-25",
        cron("* 25 * * *"),
        InvalidSchedule,
        ("hour field '25' is out of range", "0-23"),
    ),
    Case("cron-step-0", cron("*/0 * * * *"), InvalidSchedule, ("minute field '*/0'", "step '0'")),
    Case(
        "cron-nth-weekday",
        cron("0 9 * * mon#6"),
        InvalidSchedule,
        ("day-of-week field 'mon#6'", "'6'"),
    ),
    Case(
        "cron-feb-30",
        cron("0 0 30 2 *"),
        InvalidSchedule,
        ("[30] can never occur in month(s) [2]",),
    ),
    Case("cron-reboot", cron("@reboot"), InvalidSchedule, ("each instance starts", "deployment")),
    Case(
        "cron-nickname",
        cron("@every5m"),
        InvalidSchedule,
        ("unknown nickname", "@hourly", "five fields"),
    ),
    Case("cron-three-fields", cron("* * *"), InvalidSchedule, ("five fields", "got 3")),
    Case("cron-not-text", cron(5), InvalidSchedule, ("must be a string", "five fields")),
    Case(
        "cron-H-nameless", lambda tmp: CronSchedule("H * * * *"), InvalidSchedule, ("job's name",)
    ),
    Case(
        "cron-tz-not-zone", lambda tmp: job(tmp, cron="0 * * * *", tz=5), InvalidSchedule, ("IANA",)
    ),
    Case(
        "every-inf",
        lambda tmp: job(tmp, every=float("inf")),
        InvalidSchedule,
        ("century", "seconds"),
    ),
    Case("every-text", lambda tmp: job(tmp, every="60"), InvalidSchedule, ("number of seconds",)),
    Case(
        "every-and-tz",
        lambda tmp: make_schedule(cron=None, every=5, tz="UTC"),
        InvalidSchedule,
        ("tz= only applies",),
    ),
    # -- floors: lease >= 1 s, heartbeat >= 0.1 s, tick >= 0.01 s; no absurd durations ---------
    Case(
        "lease-1ms",
        lambda tmp: scheduler(tmp, lease=0.001),
        ConfigurationError,
        ("1s floor", "lease=1 or more"),
    ),
    Case(
        "lease-timedelta",
        lambda tmp: scheduler(tmp, lease=timedelta(milliseconds=500)),
        ConfigurationError,
        ("1s floor",),
    ),
    Case(
        "heartbeat-10ms",
        lambda tmp: scheduler(tmp, heartbeat=0.01),
        ConfigurationError,
        ("0.1s floor", "heartbeat=0.1 or more"),
    ),
    Case(
        "tick-1ms",
        lambda tmp: scheduler(tmp, tick=0.001),
        ConfigurationError,
        ("0.01s floor", "tick=0.01 or more"),
    ),
    Case("tick-core", lambda tmp: check_tick(0.0001), ConfigurationError, ("0.01s floor",)),
    Case(
        "lease-ms-mixup",
        lambda tmp: scheduler(tmp, lease=1e12),
        ConfigurationError,
        ("century", "not milliseconds"),
    ),
    Case(
        "lease-nan",
        lambda tmp: scheduler(tmp, lease=float("nan")),
        ConfigurationError,
        ("positive",),
    ),
    Case(
        "heartbeat-over-lease",
        lambda tmp: scheduler(tmp, lease=5, heartbeat=5),
        ConfigurationError,
        ("shorter than lease",),
    ),
    Case(
        "dramatiq-lease",
        lambda tmp: dramatiq_middleware(tmp, lease=0.5),
        ConfigurationError,
        ("1s floor",),
    ),
    Case(
        "dramatiq-queue-lease",
        lambda tmp: dramatiq_middleware(tmp, lease=1, queue_lease=0.5),
        ConfigurationError,
        ("queue_lease", "at least the lease"),
    ),
    Case(
        "celery-lease",
        lambda tmp: celery_settings(tmp, lease=0.5),
        ConfigurationError,
        ("relay_lease", "1s floor"),
    ),
    Case(
        "celery-heartbeat",
        lambda tmp: celery_settings(tmp, heartbeat=0.05),
        ConfigurationError,
        ("0.1s floor",),
    ),
    # -- jobs and the scheduler -------------------------------------------------------------
    Case("duplicate-name", twice, ConfigurationError, ("'report' is already scheduled", "name=")),
    Case(
        "stale-after-1s",
        lambda tmp: job(tmp, every=60, stale_after=1),
        ConfigurationError,
        ("5s floor", "recorded stale and never runs", "stale_after=5 or more"),
    ),
    Case(
        "name-empty",
        lambda tmp: job(tmp, every=60, name=""),
        ConfigurationError,
        ("job name '' must be a non-empty string",),
    ),
    Case(
        "two-lambdas",
        lambda tmp: [s := scheduler(tmp), *(s.job(every=60)(lambda run: None) for _ in "ab")],
        ConfigurationError,
        ("<lambda>' is already scheduled", "name="),
    ),
    Case(
        "name-with-NUL",
        lambda tmp: job(tmp, every=60, name="report\x00"),
        ConfigurationError,
        ("without '@' or control characters",),
    ),
    Case(
        "bare-decorator",
        lambda tmp: scheduler(tmp).job(lambda run: None),
        ConfigurationError,
        ("parentheses", "every=60"),
    ),
    Case(
        "handler-no-run",
        lambda tmp: job(tmp, lambda: None, every=60),
        ConfigurationError,
        ("accept the run", "relay.Run"),
    ),
    Case(
        "handler-not-callable",
        lambda tmp: job(tmp, "refresh", every=60),
        ConfigurationError,
        ("function taking the run",),
    ),
    Case(
        "backend-none",
        lambda tmp: relay.Scheduler(None),
        ConfigurationError,
        ("'sqlite:///relay.db'", "open_backend"),
    ),
    Case(
        "backend-path",
        lambda tmp: relay.Scheduler(tmp / "r.db"),
        ConfigurationError,
        ("'sqlite:///{tmp}/r.db'",),
    ),
    Case(
        "max-workers-0",
        lambda tmp: scheduler(tmp, max_workers=0),
        ConfigurationError,
        ("max_workers=0", ">= 1"),
    ),
    Case(
        "max-workers-text",
        lambda tmp: scheduler(tmp, max_workers="4"),
        ConfigurationError,
        ("whole number",),
    ),
    Case(
        "owner-empty",
        lambda tmp: scheduler(tmp, owner=""),
        ConfigurationError,
        ("non-empty string",),
    ),
    Case(
        "clock-not-callable",
        lambda tmp: scheduler(tmp, clock=5),
        ConfigurationError,
        ("function returning epoch seconds",),
    ),
    Case(
        "settings-not-dict",
        lambda tmp: from_mapping([("BACKEND", "sqlite:///r.db")]),
        ConfigurationError,
        ("must be a dict",),
    ),
    # -- slots must be aware datetimes, wherever one is taken -------------------------------
    Case(
        "run_id-naive",
        lambda tmp: relay.run_id("report", NAIVE),
        ConfigurationError,
        ("naive", AWARE_FIX),
    ),
    Case(
        "run_id-text",
        lambda tmp: relay.run_id("report", "2026-11-29"),
        ConfigurationError,
        ("must be a datetime", AWARE_FIX),
    ),
    Case(
        "format_slot-naive",
        lambda tmp: format_slot(NAIVE),
        ConfigurationError,
        ("naive", AWARE_FIX),
    ),
    Case("slot_ms-naive", lambda tmp: slot_ms(NAIVE), ConfigurationError, ("naive", AWARE_FIX)),
    Case(
        "acquire-naive",
        lambda tmp: AcquireRequest("report", NAIVE, "me", 30),
        ConfigurationError,
        ("naive", AWARE_FIX),
    ),
    Case(
        "skip-naive",
        lambda tmp: sqlite(tmp).skip("report", NAIVE, "manual"),
        ConfigurationError,
        ("naive", AWARE_FIX),
    ),
    Case(
        "skip_many-naive",
        lambda tmp: sqlite(tmp).skip_many([("report", NAIVE)], "manual"),
        ConfigurationError,
        ("naive",),
    ),
    Case(
        "claim-naive",
        lambda tmp: sqlite(tmp, "?strategy=claim").claim("report", NAIVE),
        ConfigurationError,
        ("naive", AWARE_FIX),
    ),
    Case(
        "parse_run_id",
        lambda tmp: parse_run_id("report-21:30"),
        ConfigurationError,
        ("not a run id", "job@2026-11-29T21:30:00Z"),
    ),
    # -- backend URLs and options -------------------------------------------------------------
    Case(
        "nats-port",
        lambda tmp: open_backend("nats://localhost:4x22"),
        ConfigurationError,
        ("malformed port", "host:port"),
    ),
    Case(
        "redis-port",
        lambda tmp: open_backend("redis://localhost:99999/0"),
        ConfigurationError,
        ("port",),
    ),
    Case(
        "url-option-twice",
        lambda tmp: sqlite(tmp, "?busy_timeout=1&busy_timeout=2"),
        ConfigurationError,
        ("busy_timeout more than once",),
    ),
    Case(
        "url-option-inf",
        lambda tmp: sqlite(tmp, "?busy_timeout=inf"),
        ConfigurationError,
        ("busy_timeout='inf' must be a positive number",),
    ),
    Case(
        "redis-claim-db",
        lambda tmp: open_backend("redis://localhost/cache?strategy=script"),
        ConfigurationError,
        ("database 'cache'", "redis://localhost:6379/0"),
    ),
    Case(
        "open_backend-keyword",
        lambda tmp: open_backend(lease_db(tmp), clok=lambda: 0.0),
        ConfigurationError,
        ("no option(s) clok", "clock"),
    ),
    # -- fencing helpers ---------------------------------------------------------------------
    Case(
        "fence-table",
        lambda tmp: SQLFence.sqlite(tmp / "f.db", table="my table"),
        ConfigurationError,
        ("identifier", "relay_fenced"),
    ),
    Case(
        "fence-token-text",
        lambda tmp: SQLFence.sqlite(tmp / "f.db").write("k", "7", "v"),
        ConfigurationError,
        ("run.token",),
    ),
    Case(
        "redis-fence-token",
        lambda tmp: redis_fenced_set(None, "k", 7.0, "v"),
        ConfigurationError,
        ("run.token",),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_refused_with_the_fix(case: Case, tmp_path: Path) -> None:
    with pytest.raises(case.error) as caught:
        case.call(tmp_path)
    message = str(caught.value).replace(str(tmp_path), "{tmp}")
    for words in case.words:
        assert words in message, f"{words!r} not in {message!r}"


def test_every_row_is_a_relay_error_and_ids_are_unique() -> None:
    assert all(issubclass(case.error, RelayError) for case in CASES)
    assert len({case.id for case in CASES}) == len(CASES)


def test_a_duplicate_name_stays_a_value_error(tmp_path: Path) -> None:
    """Code written against the old plain ValueError still catches it."""
    with pytest.raises(ValueError, match="already scheduled"):
        twice(tmp_path)


def test_a_refused_naive_slot_leaves_no_record(tmp_path: Path) -> None:
    backend = sqlite(tmp_path)
    with pytest.raises(ConfigurationError):
        backend.skip_many(
            [("report", datetime(2026, 11, 29, tzinfo=timezone.utc)), ("report", NAIVE)], "x"
        )
    assert backend.runs("report") == []
    backend.close()


def test_floors_accept_their_own_value(tmp_path: Path) -> None:
    """The floors are inclusive: the shortest settings the docs allow do work."""
    s = scheduler(tmp_path, lease=1, heartbeat=0.1, tick=0.01)
    assert (s.lease, s.heartbeat, s.tick_interval) == (1.0, 0.1, 0.01)
    assert scheduler(tmp_path, lease=1).heartbeat == pytest.approx(1 / 3)

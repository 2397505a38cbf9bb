"""Events as log records (one logger per type, fields in ``extra``) and hooks on the scheduler."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from pythonjsonlogger.json import JsonFormatter

import relay
from relay import RunState
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.events import (
    Event,
    EventBus,
    FencedOff,
    RunDispatched,
    RunExhausted,
    RunFailed,
    RunLost,
    RunSkipped,
    RunsMissed,
    RunStarted,
    RunSucceeded,
    RunTakenOver,
    RunWon,
    StoreUnavailable,
)
from relay.testing import FakeClock

UTC = timezone.utc
SLOT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
TAKEN = RunTakenOver(
    "job@2026-11-29T12:00:00Z", "job", SLOT, 2, 7, "b", previous_owner="a", previous_attempt=1,
    max_attempts=3,
)  # fmt: skip


def test_levels_are_those_an_operator_would_choose() -> None:
    assert RunLost.level == logging.DEBUG
    for kind in (RunWon, RunDispatched, RunStarted, RunSucceeded):
        assert kind.level == logging.INFO
    for kind in (RunSkipped, RunsMissed, RunTakenOver, FencedOff):
        assert kind.level == logging.WARNING
    for kind in (RunFailed, RunExhausted, StoreUnavailable):
        assert kind.level == logging.ERROR


def test_an_event_is_logged_on_its_types_logger_with_its_fields(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="relay.events"):
        EventBus().emit(TAKEN)
    [record] = caplog.records
    assert (record.name, record.levelno) == ("relay.events.taken_over", logging.WARNING)
    assert "from a" in record.getMessage() and "attempt 2 of 3" in record.getMessage()
    values = record.__dict__
    assert values["relay_event"] == "taken_over"
    assert values["relay_run_id"] == "job@2026-11-29T12:00:00Z"
    assert values["relay_slot"] == "2026-11-29T12:00:00Z"
    assert (values["relay_attempt"], values["relay_token"], values["relay_owner"]) == (2, 7, "b")
    assert (values["relay_previous_owner"], values["relay_previous_attempt"]) == ("a", 1)


def test_a_logger_set_above_an_events_level_drops_it(caplog: pytest.LogCaptureFixture) -> None:
    logging.getLogger("relay.events.taken_over").setLevel(logging.ERROR)
    try:
        with caplog.at_level(logging.DEBUG, logger="relay.events"):
            EventBus().emit(TAKEN)
    finally:
        logging.getLogger("relay.events.taken_over").setLevel(logging.NOTSET)
    assert caplog.records == []


def test_a_json_formatter_picks_the_fields_up() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter("%(levelname)s %(name)s %(message)s"))
    logger = logging.getLogger("relay.events")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        EventBus().emit(TAKEN)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    line = json.loads(out.getvalue())
    assert line["levelname"] == "WARNING" and line["name"] == "relay.events.taken_over"
    assert line["relay_event"] == "taken_over" and line["relay_token"] == 7
    assert line["relay_slot"] == "2026-11-29T12:00:00Z"
    assert line["relay_previous_owner"] == "a"


def test_a_failed_attempt_is_logged_with_the_handlers_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    try:
        raise ValueError("bad input")
    except ValueError as exc:
        error = exc
    failed = RunFailed(
        "job@2026-11-29T12:00:00Z", "job", SLOT, 1, 3, "a", max_attempts=3,
        error="ValueError: bad input", final=False, exception=error,
    )  # fmt: skip
    with caplog.at_level(logging.DEBUG, logger="relay.events"):
        EventBus().emit(failed)
    [record] = caplog.records
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert record.exc_info[1] is error
    assert "relay_exception" not in record.__dict__  # not a field: no JSON formatter chokes on it
    assert record.__dict__["relay_final"] is False


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteLeaseBackend]:
    backend = SQLiteLeaseBackend(tmp_path / "relay.db", clock=FakeClock(SLOT))
    yield backend
    backend.close()


def test_a_hook_that_raises_is_logged_and_never_breaks_the_run(
    store: SQLiteLeaseBackend, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = relay.Scheduler(
        store, lease=30, heartbeat=10, clock=FakeClock(SLOT), stop_timeout=1
    )
    ran: list[str] = []
    scheduler.job(every=60, name="job")(lambda run: ran.append(run.id))
    seen: list[Event] = []

    def broken(event: Event) -> None:
        raise RuntimeError("hook bug")

    for kind in (RunWon, RunDispatched, RunStarted, RunSucceeded):
        scheduler.on(kind, broken)
    scheduler.on(Event, seen.append)
    with caplog.at_level(logging.ERROR, logger="relay.events"):
        scheduler.run_pending()
        assert scheduler.join(10)
    assert ran == ["job@2026-11-29T12:00:00Z"]
    [record] = store.runs("job")
    assert record.state is RunState.SUCCEEDED
    assert [e.type for e in seen] == ["won", "dispatched", "started", "succeeded"]
    failures = [r for r in caplog.records if r.name == "relay.events" and r.exc_info]
    assert len(failures) == 4 and "hook bug" in str(failures[0].exc_info)


def test_unsubscribing_stops_a_hook(store: SQLiteLeaseBackend) -> None:
    scheduler = relay.Scheduler(
        store, lease=30, heartbeat=10, clock=FakeClock(SLOT), stop_timeout=1
    )
    scheduler.job(every=60, name="job")(lambda run: None)
    seen: list[Event] = []
    off = scheduler.on(RunWon, seen.append)
    off()
    scheduler.run_pending()
    assert scheduler.join(10)
    assert seen == []

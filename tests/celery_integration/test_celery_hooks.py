"""``relay_celery.on`` and the ``relay_event`` signal receive what the engine emits in a process."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

import pytest

import relay_celery
from relay.events import Event, RunTakenOver, RunWon
from relay_celery.events import bus

SLOT = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
WON = RunWon("job@2026-11-29T12:00:00Z", "job", SLOT, 1, 3, "beat")
TAKEN = RunTakenOver("job@2026-11-29T12:00:00Z", "job", SLOT, 2, 4, "beat", previous_owner="w")


def test_on_and_the_signal_receive_events_and_the_signal_filters_by_class(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hooked: list[Event] = []
    signalled: list[tuple[Any, Event]] = []
    takeovers: list[Event] = []

    def every(sender: Any, event: Event, **kwargs: Any) -> None:
        signalled.append((sender, event))

    def taken_over(sender: Any, event: Event, **kwargs: Any) -> None:
        takeovers.append(event)

    def broken(sender: Any, event: Event, **kwargs: Any) -> None:
        raise RuntimeError("receiver bug")

    off = relay_celery.on(Event, hooked.append)
    relay_celery.relay_event.connect(every, weak=False)
    relay_celery.relay_event.connect(taken_over, sender=RunTakenOver, weak=False)
    relay_celery.relay_event.connect(broken, weak=False)
    try:
        with caplog.at_level(logging.ERROR):
            bus.emit(WON)
            bus.emit(TAKEN)
    finally:
        off()
        for receiver in (every, taken_over, broken):
            relay_celery.relay_event.disconnect(receiver)
    assert hooked == [WON, TAKEN]
    assert signalled == [(RunWon, WON), (RunTakenOver, TAKEN)]
    assert takeovers == [TAKEN]
    assert any("receiver bug" in r.getMessage() or r.exc_info for r in caplog.records)

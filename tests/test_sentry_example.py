"""examples/sentry_checkins.py sends the check-ins it promises, to a fake Sentry transport."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

import relay
from relay.backends.sqlite import SQLiteLeaseBackend
from tests.test_examples import load

SLOT = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc).timestamp()


class Recording(Transport):
    """Keeps every check-in the SDK sends instead of sending it."""

    def __init__(self) -> None:
        super().__init__()
        self.checkins: list[dict[str, Any]] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        for item in envelope.items:
            if item.type == "check_in":
                payload = item.payload.json
                assert payload is not None
                self.checkins.append(payload)


@pytest.fixture
def transport() -> Iterator[Recording]:
    recording = Recording()
    sentry_sdk.init(
        dsn="https://key@sentry.invalid/1", transport=recording, default_integrations=False
    )
    yield recording
    sentry_sdk.get_client().close()


def test_each_attempt_sends_in_progress_then_ok_or_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, transport: Recording
) -> None:
    example = load("sentry_checkins", monkeypatch, tmp_path)
    store = SQLiteLeaseBackend(tmp_path / "relay.db", clock=lambda: SLOT)
    scheduler = relay.Scheduler(store, lease=30, heartbeat=10, clock=lambda: SLOT, stop_timeout=1)
    try:
        scheduler.job(every=60, name="fine")(lambda run: None)

        @scheduler.job(every=60, name="broken", max_attempts=2)
        def broken(run: relay.Run) -> None:
            raise RuntimeError("boom")

        example.send_checkins(scheduler.on)
        for _ in range(2):  # the second step retries "broken"
            scheduler.run_pending()
            assert scheduler.join(10)
        sentry_sdk.flush()
    finally:
        store.close()
    by_job: dict[str, list[tuple[str, str]]] = {}
    for checkin in transport.checkins:
        by_job.setdefault(checkin["monitor_slug"], []).append(
            (checkin["status"], checkin["check_in_id"])
        )
    fine = by_job["fine"]
    assert [status for status, _ in fine] == ["in_progress", "ok"]
    assert fine[0][1] == fine[1][1]  # one check-in, opened then closed
    broken_checkins = by_job["broken"]
    assert [s for s, _ in broken_checkins] == ["in_progress", "error"] * 2
    ids = [i for _, i in broken_checkins]
    assert ids[0] == ids[1] != ids[2] == ids[3]  # one check-in per attempt
    assert all("duration" in c for c in transport.checkins if c["status"] != "in_progress")

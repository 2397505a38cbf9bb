"""The timeline's reading of run records, and its SVG, on a real SQLite store with a moved clock."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from relay import AcquireRequest, ConfigurationError, Run, run_id
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.timeline import Bar, build_timeline, parse_since, read, render_html, render_svg

T0 = 1_800_000_000.0
SLOT = datetime.fromtimestamp(T0, timezone.utc)


class Store:
    """A SQLite lease store whose clock the test sets."""

    def __init__(self, path: Path) -> None:
        self.t = T0
        self.backend = SQLiteLeaseBackend(path, clock=lambda: self.t)

    def at(self, seconds: float) -> Store:
        self.t = T0 + seconds
        return self

    def lease(self, owner: str, at: float = 0, job: str = "job", slot: float = 0, **kw: Any) -> Run:
        self.at(at)
        request = AcquireRequest(job, SLOT + timedelta(seconds=slot), owner, 10, **kw)
        run = self.backend.acquire(request).run
        assert run is not None
        return run

    def lease_and_start(self, owner: str, at: float = 0, **kw: Any) -> Run:
        run = self.lease(owner, at, **kw)
        self.backend.start(run.id, run.token, owner, 10)
        return run

    def bars(self, job: str = "job") -> list[Bar]:
        timeline = read(self.backend)
        return [b for lane in timeline.lanes if lane.job == job for b in lane.bars]

    def only_bar(self) -> Bar:
        (bar,) = self.bars()
        return bar


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "relay.db")
    yield s
    s.backend.close()


def kinds(bar: Bar) -> list[str]:
    return [m.kind for m in bar.marks]


def test_a_plain_run_has_no_mark_and_shows_its_start_delay(store: Store) -> None:
    run = store.lease_and_start("a", at=2.5)
    store.at(4).backend.finish(run.id, run.token, succeeded=True)
    bar = store.only_bar()
    assert kinds(bar) == [] and bar.outcome == "succeeded" and not bar.live
    assert bar.delay == 2.5 and bar.end == SLOT + timedelta(seconds=4)


def test_a_hand_over_is_attempt_two_with_no_failure(store: Store) -> None:
    first = store.lease_and_start("a", at=1)
    store.at(2).backend.release(first.id, first.token)
    second = store.lease_and_start("b", at=3)
    assert kinds(store.only_bar()) == ["handover"]
    store.at(4).backend.finish(second.id, second.token, succeeded=True)
    bar = store.only_bar()
    assert kinds(bar) == ["handover"] and bar.marks[0].at == SLOT + timedelta(seconds=3)
    assert bar.record.owner == "b"


def test_a_takeover_while_running_then_a_success_that_cannot_tell_it_from_a_retry(
    store: Store,
) -> None:
    store.lease_and_start("a", at=0, max_attempts=3)
    second = store.lease_and_start("b", at=11, max_attempts=3)  # a's 10 s lease ran out
    assert kinds(store.only_bar()) == ["takeover"]
    store.at(12).backend.finish(second.id, second.token, succeeded=True)
    assert kinds(store.only_bar()) == ["takeover-or-retry"]


def test_a_retry_after_an_error(store: Store) -> None:
    first = store.lease_and_start("a", at=0, max_attempts=3)
    store.at(1).backend.finish(first.id, first.token, succeeded=False, error="boom")
    pending = store.only_bar()
    assert kinds(pending) == [] and pending.outcome == "pending" and pending.live
    store.lease_and_start("b", at=2, max_attempts=3)
    bar = store.only_bar()
    assert kinds(bar) == ["retry"] and "boom" in render_svg(read(store.backend))


def test_a_run_whose_last_attempt_died_is_failed_without_a_mark(store: Store) -> None:
    store.lease_and_start("a", at=0, max_attempts=1)
    store.at(11).backend.acquire(AcquireRequest("job", SLOT, "b", 10, max_attempts=1))
    bar = store.only_bar()
    assert bar.outcome == "failed" and kinds(bar) == []


def test_an_expired_lease_not_yet_taken_over(store: Store) -> None:
    store.lease_and_start("a", at=0)
    store.at(30)
    bar = store.only_bar()
    assert kinds(bar) == ["expired"] and bar.live
    assert bar.marks[0].at == SLOT + timedelta(seconds=10)
    assert bar.end == SLOT + timedelta(seconds=30)  # a live bar reaches now


def test_skips_are_points_at_their_slot_with_their_reason(store: Store) -> None:
    store.lease_and_start("a", at=0)
    skipped = store.backend.acquire(
        AcquireRequest("job", SLOT + timedelta(seconds=1), "b", 10, overlap_skip=True)
    )
    assert skipped.run is None
    store.backend.acquire(
        AcquireRequest("job", SLOT - timedelta(seconds=60), "b", 10, stale_after=5)
    )
    store.backend.skip_many([("job", SLOT + timedelta(seconds=s)) for s in (2, 3)], "missed")
    bars = store.bars()
    assert [(kinds(b), b.row, b.end == b.slot) for b in bars if b.outcome == "skipped"] == [
        (["stale"], 0, True),
        (["overlap"], 0, True),
        (["missed"], 0, True),
        (["missed"], 0, True),
    ]


def test_overlapping_runs_of_a_job_are_stacked_in_rows(store: Store) -> None:
    store.lease_and_start("a", at=0, slot=0)
    store.lease_and_start("b", at=1, slot=1)
    store.lease_and_start("c", at=2, slot=2)
    store.at(5)
    assert [b.row for b in store.bars()] == [0, 1, 2]
    assert read(store.backend).lanes[0].rows == 3


def test_lanes_by_job_and_the_since_and_job_filters(store: Store) -> None:
    for job in ("b-job", "a-job"):
        for slot in (0, 60):
            store.lease_and_start("x", at=slot, job=job, slot=slot)
    timeline = read(store.backend)
    assert [lane.job for lane in timeline.lanes] == ["a-job", "b-job"]
    recent = read(store.backend, ["b-job"], since=SLOT + timedelta(seconds=30))
    assert [(lane.job, len(lane.bars)) for lane in recent.lanes] == [("b-job", 1)]
    assert read(store.backend, limit=3).truncated and not timeline.truncated


def test_parse_since() -> None:
    now = SLOT
    assert parse_since("90s", now) == now - timedelta(seconds=90)
    assert parse_since("2h", now) == now - timedelta(hours=2)
    assert parse_since("7d", now) == now - timedelta(days=7)
    assert parse_since("2026-11-29T21:30:00Z", now) == datetime(
        2026, 11, 29, 21, 30, tzinfo=timezone.utc
    )
    assert parse_since("2026-11-29T21:30:00", now).tzinfo is not None
    with pytest.raises(ConfigurationError, match="neither a duration"):
        parse_since("yesterday", now)


def test_the_svg_has_a_group_per_run_with_its_marks_and_hover_text(store: Store) -> None:
    weird = '<b>&"job'
    run = store.lease_and_start("owner-<1>", at=0.5, job=weird)
    store.at(1).backend.finish(run.id, run.token, succeeded=True)
    store.backend.skip_many([(weird, SLOT + timedelta(seconds=5))], "missed")
    root = ET.fromstring(render_svg(read(store.backend)))  # well-formed: everything escaped
    groups = root.findall(".//{*}g[@class]")
    runs = [g for g in groups if g.get("class", "").startswith("run")]
    assert [g.get("data-run") for g in runs] == [run.id, f"{weird}@2027-01-15T08:00:05Z"]
    assert runs[1].get("data-marks") == "missed" and runs[0].get("data-marks") is None
    title = runs[0].find("{*}title")
    assert title is not None and title.text is not None
    assert f"token {run.token}" in title.text and "owner owner-<1>" in title.text
    assert "started +0.500 s after its slot" in title.text
    wait, bar = runs[0].findall("{*}rect")
    assert (wait.get("class"), bar.get("class")) == ("wait", "bar")
    assert float(wait.get("x", 0)) < float(bar.get("x", 0))


def test_the_page_needs_nothing_from_the_network(store: Store) -> None:
    store.lease_and_start("a")
    page = render_html(read(store.backend))
    for needle in ("http:", "https:", "src=", "href=", "url(", "@import", "<script", "<link"):
        assert needle not in page
    assert page.startswith("<!doctype html>") and "<svg" in page


def test_an_empty_store_draws_an_empty_timeline() -> None:
    now = SLOT
    timeline = build_timeline([], now=now)
    assert timeline.lanes == () and timeline.start == now
    assert "<svg" in render_html(timeline)


def test_marks_of_one_moment_are_drawn_side_by_side(store: Store) -> None:
    store.lease_and_start("a", at=0, max_attempts=3)
    second = store.lease_and_start("b", at=11, max_attempts=3)  # a died: taken over
    store.at(12).backend.release(second.id, second.token)  # b stopped: handed over
    store.lease_and_start("c", at=13, max_attempts=3)
    bar = store.only_bar()
    assert kinds(bar) == ["handover", "takeover"] and bar.marks[0].at == bar.marks[1].at
    root = ET.fromstring(render_svg(read(store.backend)))
    paths = root.findall(".//{*}path[@class]")
    starts = sorted(float(p.get("d", "M0").split()[0][1:]) for p in paths)
    assert [p.get("class") for p in paths] == ["mark m-handover", "mark m-takeover"]
    assert starts[1] - starts[0] == 9


def test_manual_runs_and_paused_slots(store: Store) -> None:
    store.lease_and_start("a", at=0)
    store.at(1).backend.pause("job", "maintenance", "ops")
    skipped = store.backend.acquire(AcquireRequest("job", SLOT + timedelta(seconds=1), "a", 10))
    assert skipped.run is None
    manual = store.at(2).backend.trigger("job")
    bars = {b.record.id: b for b in store.bars()}
    assert kinds(bars[manual.id]) == ["manual"] and bars[manual.id].outcome == "pending"
    assert kinds(bars[run_id("job", SLOT + timedelta(seconds=1))]) == ["paused"]
    svg = render_svg(read(store.backend))
    assert 'data-marks="paused"' in svg and 'class="mark m-paused"' in svg

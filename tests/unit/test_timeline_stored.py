"""Stored schedules on the timeline: lanes marked as stored, edits as marks, on a real SQLite
store whose clock the test moves (so each edit's moment is known)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from relay import Control
from relay.stored import ScheduleChange
from relay.timeline import read, render_html, render_svg, summary
from relay.timeline.stored import edit_of
from tests.unit.test_timeline import SLOT, Store


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = Store(tmp_path / "relay.db")
    yield s
    s.backend.close()


def edited(store: Store) -> Control:
    """``report`` (task ``mail``) added at 0 s, a run at 10 s, edited at 20, paused at 30,
    resumed at 40; ``gone`` (task ``purge``) added at 5 s, a run at 10 s, removed at 50."""
    control = Control(store.backend)
    store.at(0)
    control.add_schedule("report", "mail", every=60, force=True, by="ann")
    store.at(5)
    control.add_schedule("gone", "purge", every=60, force=True, by="bob")
    store.lease_and_start("x", at=10, job="report", slot=10)
    store.lease_and_start("x", at=10, job="gone", slot=10)
    store.at(20)
    control.update_schedule("report", version=1, every=120, by="ann")
    store.at(30)
    control.update_schedule("report", version=2, enabled=False, by="cy")
    store.at(40)
    control.update_schedule("report", version=3, enabled=True, by="cy")
    store.at(50)
    control.remove_schedule("gone", version=1, by="bob")
    return control


def test_stored_schedules_are_lanes_with_their_task_state_and_edits(store: Store) -> None:
    edited(store)
    store.lease_and_start("x", at=55, job="code-job", slot=55)
    lanes = {lane.job: lane for lane in read(store.backend).lanes}
    assert set(lanes) == {"code-job", "gone", "report"}
    assert lanes["code-job"].stored is None
    report, gone = lanes["report"].stored, lanes["gone"].stored
    assert report is not None and gone is not None
    assert (report.task, report.version, report.state) == ("mail", 4, "enabled")
    at = [(e.kind, e.version, e.by, (e.at - SLOT).total_seconds()) for e in report.edits]
    assert at == [("add", 1, "ann", 0), ("edit", 2, "ann", 20), ("pause", 3, "cy", 30),
                  ("resume", 4, "cy", 40)]  # fmt: skip
    assert report.edits[1].fields == ("every",) and "every" in report.edits[1].text
    # A removed schedule's lane keeps its past run and says it was removed.
    assert (gone.task, gone.state) == ("purge", "removed") and len(lanes["gone"].bars) == 1
    assert [e.kind for e in gone.edits] == ["add", "remove"]


def test_a_stored_schedule_with_no_run_yet_has_a_lane_and_widens_the_period(
    store: Store,
) -> None:
    control = Control(store.backend)
    store.at(0)
    control.add_schedule("fresh", "mail", every=60, force=True)
    store.at(30)
    control.update_schedule("fresh", version=1, enabled=False)
    timeline = read(store.backend)
    (lane,) = timeline.lanes
    assert lane.job == "fresh" and lane.bars == () and lane.stored is not None
    assert lane.stored.state == "paused" and [e.kind for e in lane.stored.edits] == ["add", "pause"]
    assert timeline.start == SLOT and timeline.end == SLOT + timedelta(seconds=30)


def test_edits_before_the_period_are_left_out_and_counted(store: Store) -> None:
    edited(store)
    since = SLOT + timedelta(seconds=25)
    (lane,) = read(store.backend, ["report"], since=since).lanes
    assert lane.stored is not None and lane.stored.earlier == 2
    assert [e.kind for e in lane.stored.edits] == ["pause", "resume"]


def test_without_since_edits_long_before_the_runs_are_left_out(store: Store) -> None:
    control = Control(store.backend)
    store.at(0)
    control.add_schedule("daily", "mail", every=60, force=True)
    store.at(86_300)
    control.update_schedule("daily", version=1, every=30)
    for at in (86_400, 86_460):
        store.lease_and_start("x", at=at, job="daily", slot=at)
    timeline = read(store.backend)
    (lane,) = timeline.lanes
    # The runs span 60 s: edits up to 60 s before the first are drawn, older ones counted.
    assert lane.stored is not None and lane.stored.earlier == 2
    assert [e.kind for e in lane.stored.edits] == [] and timeline.start == SLOT + timedelta(
        seconds=86_400
    )
    store.at(86_350)
    control.update_schedule("daily", version=2, every=60)
    (lane,) = read(store.backend).lanes
    assert lane.stored is not None and lane.stored.earlier == 2
    assert [(e.kind, e.version) for e in lane.stored.edits] == [("edit", 3)]


def test_the_svg_marks_each_edit_on_its_lane_with_hover_text(store: Store) -> None:
    edited(store)
    timeline = read(store.backend)
    root = ET.fromstring(render_svg(timeline))  # well-formed: names and users escaped
    lanes = {g.get("data-job"): g for g in root.iter() if g.get("class") == "lane"}
    edits = [g for g in lanes["report"].iter() if (g.get("class") or "").startswith("edit ")]
    assert [(g.get("data-edit"), g.get("data-version")) for g in edits] == [
        ("add", "1"), ("edit", "2"), ("pause", "3"), ("resume", "4")]  # fmt: skip
    xs = [float(g.find("{*}line").get("x1", 0)) for g in edits]  # type: ignore[union-attr]
    assert xs == sorted(xs) and xs[0] < xs[1]
    title = edits[2].find("{*}title")
    assert title is not None and title.text is not None
    assert title.text.startswith("pause v3 at") and "by cy" in title.text
    labels = " ".join(t.text or "" for t in root.iter() if t.tag == "tspan")
    assert "stored · mail" in labels and "stored · purge (removed)" in labels
    assert "2 stored schedules, 6 edits" in summary(timeline)
    assert "data-edit" in render_html(timeline)


def test_a_code_only_store_draws_no_edit_legend(store: Store) -> None:
    store.lease_and_start("x", at=0)
    svg = render_svg(read(store.backend))
    assert "data-edit" not in svg and "edits:" not in svg and "stored ·" not in svg


@pytest.mark.parametrize(
    ("action", "changes", "kind"),
    [
        ("add", {"task": [None, "t"], "enabled": [None, True]}, "add"),
        ("update", {"every": [60, 120]}, "edit"),
        ("update", {"enabled": [True, False]}, "pause"),
        ("update", {"enabled": [False, True], "every": [60, 120]}, "resume"),
        ("remove", {"task": ["t", None], "enabled": [True, None]}, "remove"),
    ],
)
def test_each_history_entry_is_one_kind_of_edit(
    action: str, changes: dict[str, Any], kind: str
) -> None:
    change = ScheduleChange("s", 2, SLOT, "ann@host", action, changes)
    edit = edit_of(change)
    assert (edit.kind, edit.version, edit.by, edit.at) == (kind, 2, "ann@host", SLOT)


def test_a_schedule_that_neither_ran_nor_changed_in_the_period_has_no_lane_and_no_read(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    control = Control(store.backend)
    store.at(0)
    control.add_schedule("quiet", "mail", every=86_400, force=True)
    control.add_schedule("busy", "mail", every=60, force=True)
    store.at(3000)
    control.add_schedule("new", "mail", every=60, force=True)
    store.lease_and_start("x", at=3600, job="busy", slot=3600)
    store.lease_and_start("x", at=3660, job="busy", slot=3660)
    read_histories: list[str] = []
    history = store.backend.schedule_history
    monkeypatch.setattr(
        store.backend, "schedule_history", lambda n: read_histories.append(n) or history(n)
    )
    # The period: the runs (3600 to 3660 s) and as long again before them; "new" changed in it.
    assert [lane.job for lane in read(store.backend).lanes] == ["busy"]
    assert sorted(read_histories) == ["busy"]
    since = SLOT + timedelta(seconds=2000)
    assert [lane.job for lane in read(store.backend, since=since).lanes] == ["busy", "new"]
    named = read(store.backend, ["quiet"], since=since).lanes  # named: drawn all the same
    assert [(lane.job, lane.stored is not None) for lane in named] == [("quiet", True)]

"""The timeline page in headless Chromium, for a scenario played by real scheduler processes.

Two instances race on a SQLite store for two jobs: ``report`` (a second and a half of work every
second) and ``slow`` (``overlap="skip"``, 2.5 s of work every second). One instance is killed with
SIGKILL in the middle of a ``report`` run, and the other takes the run over; that one is then
stopped with SIGTERM in the middle of a run, which it hands over; nothing runs for a few seconds;
a third instance starts, records the slots nobody ran as missed, and runs the handed-over run.

``relay timeline`` draws the store, Chromium lays the page out, and the test reads back where each
lane, run and mark landed: the right lane, the right place on the time axis, the right marks.

A second scenario: one instance runs a stored schedule while it is edited, paused, resumed and
removed; each edit is a mark on the schedule's lane at the moment the store recorded it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from relay import Control, RunState, open_backend
from relay.runs import RunRecord, parse_run_id
from relay.stored import ScheduleChange
from tests.support.browser import chromium, drawn, require_chromium, screenshot
from tests.support.procs import ROOT

pytestmark = pytest.mark.slow

LEASE, HEARTBEAT, WORK = 1.5, 0.3, 1.5


class Scenario:
    """The instances' processes and the log of ``report``'s starts and ends."""

    def __init__(self, folder: Path) -> None:
        self.url = f"sqlite:///{folder / 'relay.db'}"
        self.log = folder / "report.log"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.times: dict[str, float] = {}

    def start(self, name: str, stop_timeout: float) -> None:
        args = {
            "name": name, "url": self.url, "log": str(self.log), "lease": LEASE,
            "heartbeat": HEARTBEAT, "work": WORK, "stop_timeout": stop_timeout,
        }  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        cmd = [sys.executable, "-m", "tests.browser.scenario_instance", json.dumps(args)]
        self.procs[name] = subprocess.Popen(cmd, cwd=ROOT, env=env)
        self.times[f"{name} started"] = time.time()

    def entries(self) -> list[list[Any]]:
        text = self.log.read_text() if self.log.exists() else ""
        return [json.loads(line) for line in text.splitlines()]

    def fresh_start(self, name: str) -> list[Any] | None:
        """A run ``name`` started less than 0.4 s ago: it has a second of work left."""
        ended = {(e[0], e[1]) for e in self.entries() if e[4] == "done"}
        for entry in reversed(self.entries()):
            fresh = time.time() - entry[5] < 0.4
            if (
                entry[3] == name
                and entry[4] == "start"
                and fresh
                and (entry[0], entry[1]) not in ended
            ):
                return entry
        return None

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def wait_for(predicate: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return found


@pytest.fixture
def played(tmp_path: Path) -> Iterator[tuple[Scenario, dict[str, Any]]]:
    """Play the scenario; yield it with what happened: the killed run, the handed-over run."""
    require_chromium()  # before spending half a minute on processes
    s = Scenario(tmp_path)
    try:
        s.start("a", stop_timeout=5)
        s.start("b", stop_timeout=0.1)
        killed = wait_for(lambda: s.fresh_start("a"), 30)
        os.kill(s.procs["a"].pid, signal.SIGKILL)
        s.procs["a"].wait()
        took_over = wait_for(
            lambda: [e for e in s.entries() if e[0] == killed[0] and e[1] == 2 and e[4] == "done"],
            30,
        )
        handed = wait_for(lambda: s.fresh_start("b"), 30)
        s.procs["b"].send_signal(signal.SIGTERM)
        assert s.procs["b"].wait(timeout=30) == 0
        s.times["down"] = time.time()
        time.sleep(4)
        s.start("c", stop_timeout=5)
        wait_for(lambda: [e for e in s.entries() if e[0] == handed[0] and e[4] == "done"], 30)
        time.sleep(2)
        s.procs["c"].send_signal(signal.SIGTERM)
        assert s.procs["c"].wait(timeout=30) == 0
        yield s, {"killed": killed, "took_over": took_over[0], "handed": handed}
    finally:
        s.stop()


def records(url: str) -> dict[str, RunRecord]:
    backend = open_backend(url, read_only=True)
    assert backend.capability == "lease"
    try:
        return {r.id: r for r in backend.runs(None, 10_000)}
    finally:
        backend.close()


def test_the_timeline_of_a_takeover_a_hand_over_overlap_skips_and_missed_slots(
    played: tuple[Scenario, dict[str, Any]], tmp_path: Path
) -> None:
    scenario, what = played
    page = tmp_path / "timeline.html"
    made = subprocess.run(
        [sys.executable, "-m", "relay.cli", "timeline", "--backend", scenario.url,
         "--html", str(page)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    stored = records(scenario.url)

    with chromium() as driver:
        driver.get(page.as_uri())
        seen = drawn(driver)
        screenshot(driver, "timeline-scenario")

    runs = {r["id"]: r for r in seen["runs"]}
    assert set(runs) == set(stored)  # every run is drawn, once
    assert seen["jobs"] == ["report", "slow"]
    check_lanes(seen)
    slot_x = check_time_axis(runs)
    px_per_s = (slot_x(1) - slot_x(0)) / 1

    # The SIGKILLed run: taken over by b once a's lease ran out; a success cannot tell it from a
    # retry, so it is marked "takeover-or-retry", where the second attempt started.
    killed = runs[what["killed"][0]]
    assert "takeover-or-retry" in killed["marks"] and stored[killed["id"]].attempt == 2
    mark = part(killed, "mark")
    bar = part(killed, "bar")
    assert abs(centre(mark) - bar["x"]) <= 1.5  # the mark points at the new attempt's start
    after_slot = (centre(mark) - slot_x(when(killed["id"]))) / px_per_s
    assert after_slot >= LEASE - 0.3  # not before the first lease could have expired
    assert "owner b:" in killed["title"] and f"token {what['took_over'][2]}" in killed["title"]

    # The run b handed over on SIGTERM: run by c, attempt 2 without a failure.
    handed = runs[what["handed"][0]]
    assert handed["marks"] == ["handover"] and "owner c:" in handed["title"]
    assert stored[handed["id"]].failures == 0

    # Overlap skips of "slow": each diamond lies within a run of "slow" that held the lease.
    slow = [r for r in runs.values() if r["job"] == "slow" and "s-skipped" not in r["cls"]]
    overlaps = [r for r in runs.values() if r["marks"] == ["overlap"]]
    assert overlaps and all(r["job"] == "slow" for r in overlaps)
    for skip in overlaps:
        x = centre(skip["parts"][0])
        assert any(s["parts"][0]["x"] <= x <= part(s, "bar")["right"] for s in slow), skip["id"]

    # Missed slots: in both lanes, between the stop of b and the start of c.
    missed = [r for r in runs.values() if r["marks"] == ["missed"]]
    assert {r["job"] for r in missed} == {"report", "slow"}
    assert len(missed) == sum(1 for r in stored.values() if r.reason == "missed")
    down, back = scenario.times["down"], scenario.times["c started"]
    for r in missed:
        x = centre(r["parts"][0])
        assert slot_x(down - 1.5) <= x <= slot_x(back + 0.5), r["id"]
        assert stored[r["id"]].state is RunState.SKIPPED


def check_lanes(seen: dict[str, Any]) -> None:
    """Each run is drawn inside its own lane's band, and each lane's label beside it."""
    bands = dict(zip(seen["jobs"], seen["lanes"], strict=True))
    labels = {t["text"]: t for t in seen["labels"]}
    for job, band in bands.items():
        assert band["y"] <= centre_y(labels[job]) <= band["bottom"]
    for run in seen["runs"]:
        band = bands[run["job"]]
        for p in run["parts"]:
            assert band["y"] <= centre_y(p) <= band["bottom"], run["id"]


def check_time_axis(runs: dict[str, dict[str, Any]]) -> Callable[[float], float]:
    """Every run starts at its slot on one linear time axis; return that axis (seconds -> x)."""
    starts = {r["id"]: start_x(r) for r in runs.values()}
    first = min(runs, key=when)
    last = max(runs, key=when)
    t0, t1 = when(first), when(last)
    scale = (starts[last] - starts[first]) / (t1 - t0)
    assert scale > 5  # a second is wide enough to see

    def x(t: float) -> float:
        return starts[first] + (t - t0) * scale

    for run_id, x_drawn in starts.items():
        assert abs(x_drawn - x(when(run_id))) <= 1.5, run_id
    return x


def when(run_id: str) -> float:
    return parse_run_id(run_id)[1].timestamp()


def start_x(run: dict[str, Any]) -> float:
    """Where a run's drawing starts: its skip diamond's centre, or its bar's left edge."""
    first = run["parts"][0]
    return centre(first) if first["cls"].startswith("mark") else float(first["x"])


def part(run: dict[str, Any], cls: str) -> dict[str, Any]:
    return next(p for p in run["parts"] if p["cls"].split()[0] == cls)


def centre(box: dict[str, Any]) -> float:
    return (box["x"] + box["right"]) / 2


def centre_y(box: dict[str, Any]) -> float:
    return (box["y"] + box["bottom"]) / 2


EDITS_JS = """
const box = e => { const b = e.getBoundingClientRect();
  return {x: b.left, right: b.right, y: b.top, bottom: b.bottom}; };
return [...document.querySelectorAll('g.edit')].map(g => ({
  job: g.closest('g.lane').dataset.job, kind: g.dataset.edit, version: +g.dataset.version,
  title: g.querySelector('title').textContent, line: box(g.querySelector('line')),
}));
"""
"""Where the browser drew each stored schedule's edit."""


@pytest.fixture
def edited(tmp_path: Path) -> Iterator[tuple[str, list[ScheduleChange]]]:
    """A real instance runs stored schedule ``ticker`` (every second) while it is edited (every
    2 s), paused for 3 s, resumed and removed; yield the store's URL and the schedule's history."""
    require_chromium()
    url = f"sqlite:///{tmp_path / 'relay.db'}"
    log = tmp_path / "runs.log"
    args = {"name": "a", "url": url, "log": str(log)}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "tests.support.stored_instance", json.dumps(args)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env)

    def runs_of(version: int) -> list[Any]:
        text = log.read_text() if log.exists() else ""
        return [line for line in map(json.loads, text.splitlines()) if line[2] == version]

    try:
        with Control(url) as control:
            wait_for(lambda: control.allowed_tasks(), 60)
            control.add_schedule("ticker", "echo", every=1, by="ann")
            wait_for(lambda: len(runs_of(1)) >= 3, 30)
            control.update_schedule("ticker", version=1, every=2, by="ann")
            wait_for(lambda: len(runs_of(2)) >= 2, 30)
            control.update_schedule("ticker", version=2, enabled=False, by="bob")
            time.sleep(3)
            control.update_schedule("ticker", version=3, enabled=True, by="bob")
            wait_for(lambda: len(runs_of(4)) >= 2, 30)
            control.remove_schedule("ticker", version=4, by="cy")
            time.sleep(1.5)
            history = control.schedule_history("ticker")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        yield url, history
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_the_timeline_of_a_stored_schedule_edited_paused_resumed_and_removed(
    edited: tuple[str, list[ScheduleChange]], tmp_path: Path
) -> None:
    url, history = edited
    page = tmp_path / "timeline.html"
    made = subprocess.run(
        [sys.executable, "-m", "relay.cli", "timeline", "--backend", url, "--html", str(page)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    stored = records(url)

    with chromium() as driver:
        driver.get(page.as_uri())
        seen = drawn(driver)
        edits = driver.execute_script(EDITS_JS)
        screenshot(driver, "timeline-stored-schedule")

    runs = {r["id"]: r for r in seen["runs"]}
    assert set(runs) == set(stored) and seen["jobs"] == ["ticker"]
    check_lanes(seen)
    label = seen["labels"][0]
    assert label["text"] == "ticker"
    slot_x = check_time_axis(runs)

    # One mark per change, in order, each where the store's clock says it was made.
    assert [(e["kind"], e["version"]) for e in edits] == [
        ("add", 1), ("edit", 2), ("pause", 3), ("resume", 4), ("remove", 5)]  # fmt: skip
    band = seen["lanes"][0]
    for edit, change in zip(edits, history, strict=True):
        assert abs(centre(edit["line"]) - slot_x(change.at.timestamp())) <= 1.5, edit
        assert band["y"] <= centre_y(edit["line"]) <= band["bottom"]
        assert f"v{change.version}" in edit["title"] and f"by {change.by}" in edit["title"]
    x_of = {e["kind"]: centre(e["line"]) for e in edits}
    starts = [start_x(r) for r in runs.values()]
    # Nothing ran while it was paused, nor after its removal; it ran before and between them.
    assert not [x for x in starts if x_of["pause"] < x < x_of["resume"]]
    assert not [x for x in starts if x > x_of["remove"]]
    assert [x for x in starts if x_of["add"] < x < x_of["edit"]]
    assert [x for x in starts if x_of["resume"] < x < x_of["remove"]]

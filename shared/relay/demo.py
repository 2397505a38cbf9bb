"""``relay demo``: several instances race for the same runs on one SQLite file; one is killed.

The parent starts the instances as real processes, shows a live table of who won each run, kills
one instance with SIGKILL in the middle of a run, and ends with a summary. Each instance runs a
``report`` job every second whose work takes up to a second and a half; its effect is a row keyed by
the run id, so a run taken over after a kill still has its effect exactly once.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

import relay
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.runs import RunRecord, RunState, format_slot

__all__ = ["run_demo"]

LEASE, HEARTBEAT, TICK = 2.0, 0.5, 0.1
SETTLE = 15.0  # seconds after the window for the last runs (and any takeover) to finish


def run_demo(*, instances: int, duration: float, kill: bool, console: Console) -> bool:
    """Run the demo; ``True`` if every scheduled run ran exactly once and none was lost."""
    with tempfile.TemporaryDirectory(prefix="relay-demo-") as folder:
        demo = Demo(Path(folder), instances, duration, kill)
        with Live(demo.render(), console=console, refresh_per_second=4) as live:
            demo.start()
            try:
                while not demo.done():
                    demo.step()
                    live.update(demo.render())
                    time.sleep(0.25)
            finally:
                demo.stop()
            live.update(demo.render())
        page = write_timeline(demo.store)  # before summarize() closes the store
        ok = demo.summarize(console)
        console.print(f"timeline of every run: {page}")
        return ok


@dataclass
class Demo:
    """The parent's view: processes, the store, and what happened."""

    folder: Path
    count: int
    duration: float
    kill: bool
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    killed: dict[str, str] = field(default_factory=dict)  # instance -> run id it was running
    start_at: float = 0.0

    def start(self) -> None:
        self.store = SQLiteLeaseBackend(self.folder / "relay.db")
        effects = _effects(self.folder)
        effects.close()
        self.start_at = time.time() + 1.5
        self.window = (self.start_at, self.start_at + self.duration)
        for n in range(1, self.count + 1):
            name = f"instance-{n}"
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "relay.demo", str(self.folder), name, str(self.start_at)]
            )

    def step(self) -> None:
        """Kill one instance in the middle of a run, once, about a third of the way in."""
        if not self.kill or self.killed or time.time() < self.window[0] + self.duration / 3:
            return
        for record in self.store.runs("report", limit=5):
            owner = (record.owner or "").split(":")[0]
            if record.state is RunState.RUNNING and record.started_at and owner in self.procs:
                os.kill(self.procs[owner].pid, signal.SIGKILL)
                self.killed[owner] = record.id
                return

    def done(self) -> bool:
        now = time.time()
        if now < self.window[1]:
            return False
        records = self.window_records()
        settled = all(r.state.final for r in records) and len(records) >= self.expected()
        return settled or now > self.window[1] + SETTLE

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()

    def expected(self) -> int:
        first, last = (int(t) + (t % 1 > 0) for t in self.window)
        return last - first

    def window_records(self) -> list[RunRecord]:
        low, high = self.window
        return [
            r
            for r in self.store.runs("report", limit=500)
            if low <= r.scheduled_for.timestamp() < high
        ]

    def render(self) -> Group:
        table = Table(title="relay demo: instances racing for the job 'report' (every 1 s)")
        for column in ("run", "state", "winner", "attempt", "token", "note"):
            table.add_column(column)
        records = self.window_records() if self.start_at else []
        shown = records[:12]
        # Keep the killed run in view, so its takeover can be seen when it happens.
        shown += [r for r in records[12:] if r.id in self.killed.values()]
        for r in shown:
            note = ""
            if r.id in self.killed.values():
                note = "[red]runner killed with SIGKILL[/]"
            if r.attempt > 1:
                note += (" → " if note else "") + "[magenta]taken over[/]"
            table.add_row(
                format_slot(r.scheduled_for)[11:],
                _state(r),
                (r.owner or "").split(":")[0],
                str(r.attempt),
                str(r.token),
                note,
            )
        alive = ", ".join(
            f"{name} [red](killed)[/]" if name in self.killed else name for name in self.procs
        )
        return Group(table, Text.from_markup(f"instances: {alive}"))

    def summarize(self, console: Console) -> bool:
        records = {r.id: r for r in self.window_records()}
        effects = _effects(self.folder)
        done = dict(effects.execute("SELECT run_id, COUNT(*) FROM completions GROUP BY run_id"))
        effects.close()
        scheduled = self.expected()
        once = sum(
            1 for rid, r in records.items() if r.state is RunState.SUCCEEDED and done.get(rid) == 1
        )
        twice = sum(1 for rid in records if done.get(rid, 0) > 1)
        taken = sum(1 for r in records.values() if r.attempt > 1)
        lost = scheduled - once - twice
        console.print(
            f"\nruns scheduled: {scheduled}   run exactly once: {once}   taken over: {taken}   "
            f"run twice: {twice}   lost: {lost}"
        )
        if self.killed:
            ((who, rid),) = self.killed.items()
            fate = records.get(rid)
            console.print(
                f"{who} was killed while running {rid}; "
                + (f"{(fate.owner or '').split(':')[0]} took it over (attempt {fate.attempt}, "
                   f"token {fate.token}) and finished it." if fate and fate.attempt > 1 else "…")
            )  # fmt: skip
        self.store.close()
        return lost == 0 and twice == 0


def _state(record: RunRecord) -> str:
    colour = {"succeeded": "green", "running": "yellow", "failed": "red"}.get(
        record.state.value, "cyan"
    )
    return f"[{colour}]{record.state.value}[/]"


def _effects(folder: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(folder / "effects.db", timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS completions (run_id TEXT, instance TEXT, token INTEGER)"
    )
    conn.commit()
    return conn


def instance(folder: Path, name: str, start_at: float) -> None:
    """One demo instance: a Scheduler on the shared store, running ``report``."""
    time.sleep(max(0.0, start_at - time.time()))
    scheduler = relay.Scheduler(
        f"sqlite:///{folder / 'relay.db'}", lease=LEASE, heartbeat=HEARTBEAT, tick=TICK,
        owner=f"{name}:{os.getpid()}", stop_timeout=5,
    )  # fmt: skip
    local = threading.local()

    @scheduler.job(every=1, name="report", max_attempts=3)
    def report(run: relay.Run) -> None:
        time.sleep(random.uniform(0.3, 1.5))  # the work
        if not hasattr(local, "conn"):
            local.conn = _effects(folder)
        local.conn.execute(
            "INSERT INTO completions (run_id, instance, token) VALUES (?, ?, ?)",
            (run.id, name, run.token),
        )
        local.conn.commit()

    scheduler.run()


def write_timeline(store: SQLiteLeaseBackend) -> Path:
    """Write the demo's timeline to a new HTML file in the temporary folder; return its path."""
    from relay import timeline

    handle, name = tempfile.mkstemp(prefix="relay-demo-timeline-", suffix=".html")
    os.close(handle)
    return timeline.write_html(timeline.read(store), name, title="relay demo: a timeline of runs")


if __name__ == "__main__":
    instance(Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]))

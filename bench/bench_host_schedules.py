"""Stored schedules on Celery beat and relay-dramatiq: how soon three real schedulers see an edit.

For each host, three scheduler processes on one store: ``celery beat``
(``bench/celery_schedules_app.py``, ``beat_max_loop_interval`` 300 s: Celery's own default) or
``relay-dramatiq`` (``bench/dramatiq_schedules_app.py``, the default tick of 1 s). 100 edits of one
stored schedule, a random 0.05 to 0.5 s apart. For each edit and scheduler, the time from the
edit's return to the scheduler applying it (or a later version): p50 and p99. Target: p99 within
the host's stored-schedule step (beat: ``relay_celery.beat.STORED_TICK``; relay-dramatiq: its
tick; 1 s each) plus a round trip (0.25 s on a loaded machine).

    python bench/bench_host_schedules.py [--hosts celery dramatiq] [--only sqlite postgres redis]
                                         [--edits 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from bench.bench_schedules import edit_delays, percentile, stop  # noqa: E402
from bench.stores import store  # noqa: E402
from bench.table import Row, at_most  # noqa: E402

EDITS = 100
SCHEDULERS = 3
ROUND_TRIP = 0.25
"""A store round trip on a loaded machine, on top of the host's step in the target."""


@dataclass(frozen=True)
class Host:
    """One host's scheduler process and what its rows are called."""

    label: str
    """The rows' bench name prefix, e.g. ``celery schedules``."""
    scheduler: str
    """What one process is called in the figures (``beat``, ``scheduler``)."""
    command: Callable[[Path], list[str]]
    """The command of one scheduler process, given a folder of its own (its cwd)."""
    step: Callable[[], float]
    """Seconds between two looks at the stored schedules (imported late: the host's package)."""


def _beat(folder: Path) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "bench.celery_schedules_app", "beat",
            "-s", str(folder / "beat"), "-l", "WARNING"]  # fmt: skip


def _relay_dramatiq(folder: Path) -> list[str]:
    return [sys.executable, "-m", "relay_dramatiq", "bench.dramatiq_schedules_app",
            "--log-level", "WARNING"]  # fmt: skip


def _beat_step() -> float:
    from relay_celery.beat import STORED_TICK

    return STORED_TICK


def _dramatiq_step() -> float:
    from relay.jobs import check_tick

    return check_tick(None)  # relay-dramatiq's default tick (RelayMiddleware(tick=None))


HOSTS = {
    "celery": Host("celery schedules", "beat", _beat, _beat_step),
    "dramatiq": Host("dramatiq schedules", "scheduler", _relay_dramatiq, _dramatiq_step),
}


def visibility(host: str, name: str, edits: int = EDITS) -> list[Row]:
    """p50 and p99 of edit-to-applied over ``edits`` edits and three of ``host``'s schedulers."""
    spec = HOSTS[host]
    with store(name) as url, tempfile.TemporaryDirectory() as folder:
        logs = [Path(folder) / f"{spec.scheduler}{n}.log" for n in range(SCHEDULERS)]
        procs = []
        for n, log in enumerate(logs):
            own = Path(folder) / str(n)
            own.mkdir()
            env = {**os.environ, "RELAY_B_BACKEND": url, "RELAY_B_LOG": str(log),
                   "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "shared")])}  # fmt: skip
            # Their banners to stderr: stdout is the table of `python -m bench`.
            procs.append(subprocess.Popen(spec.command(own), cwd=own, env=env, stdout=sys.stderr))
        try:
            delays = edit_delays(url, logs, edits)
        finally:
            stop(procs)
    p99 = percentile(delays, 0.99)
    target = spec.step() + ROUND_TRIP
    bench, one = f"{spec.label} {name}", spec.scheduler
    return [
        Row(bench, f"edit seen by a {one}, p99 ({edits} edits x {SCHEDULERS} {one}s)", p99, "s",
            target=f"<= {target:g} s", check=at_most(target)),
        Row(bench, f"edit seen by a {one}, p50", statistics.median(delays), "s"),
    ]  # fmt: skip


def rows(quick: bool = False) -> list[Row]:
    """Visibility on each host, on SQLite and Redis (PostgreSQL too unless quick)."""
    names = ("sqlite", "redis") if quick else ("sqlite", "postgres", "redis")
    edits = 30 if quick else EDITS
    return [row for host in HOSTS for name in names for row in visibility(host, name, edits)]


def main() -> None:
    """Run the chosen hosts and stores and print the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", nargs="*", default=list(HOSTS), choices=list(HOSTS))
    parser.add_argument("--only", nargs="*", default=["sqlite", "postgres", "redis"],
                        choices=["sqlite", "postgres", "redis", "nats_kv"])  # fmt: skip
    parser.add_argument("--edits", type=int, default=EDITS)
    args = parser.parse_args()
    for host in args.hosts:
        for name in args.only:
            for row in visibility(host, name, args.edits):
                print(f"{row.bench:28} {row.figure:56} {row.value:10.4g} {row.unit}")


if __name__ == "__main__":
    main()

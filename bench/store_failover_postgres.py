"""PostgreSQL failed over many times under three instances: what each topology loses or doubles.

For each topology (a synchronous standby with ``require_sync=1``; an asynchronous one; an
asynchronous one held a second behind before each kill; a synchronous one promoted 10 s after
the kill) it starts a primary and a standby of its
own (``tests/support/pg_standby.py``) and runs ``tests/support/pg_failover.race``: three instance
processes, a job every second whose runs take 0.5 s, and ``N`` rounds of SIGKILL of the primary
with a run in flight, promotion of the standby and a rebuild of the dead server as the new
standby. It counts the slots no handler ran (lost), the runs a handler ran twice (doubled) and
the completed runs the final store does not show succeeded (forgotten), and times each kill to
the next started run (p50, p99).

    python bench/store_failover_postgres.py [--promotions 20]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "shared")]

from bench.bench_failover import percentiles  # noqa: E402
from bench.table import Row, at_most  # noqa: E402

TOPOLOGIES = {
    "synchronous standby (require_sync=1)": (True, 0.0, 0.0),
    "asynchronous standby": (False, 0.0, 0.0),
    "asynchronous standby 1 s behind": (False, 1.0, 0.0),
    "synchronous standby promoted 10 s after the kill, lease 30 s": (True, 0.0, 10.0),
}
"""Label: (synchronous, seconds the standby is held behind before each kill, seconds from the
kill to the promotion). A promotion 10 s late is a failover manager's detection time; the lease
is then 30 s, so that runs in progress keep it through the outage."""


def measure(label: str, synchronous: bool, lag: float, down: float, promotions: int) -> list[Row]:
    """The rows of one topology over ``promotions`` failovers."""
    from tests.support.pg_failover import Timing, race
    from tests.support.pg_standby import pg_pair

    timing = Timing(lease=30.0) if down else Timing()
    with (
        tempfile.TemporaryDirectory(prefix="relay-pg-failover-") as folder,
        pg_pair(synchronous=synchronous) as pair,
    ):
        report = race(pair, Path(folder), failovers=promotions, lag=lag, down=down, timing=timing)
    p50, p99, _ = percentiles([f.to_next_start for f in report.failovers])
    name = f"postgres, {label}, {promotions} promotions"
    zero = at_most(0) if synchronous else None
    target = "= 0" if synchronous else ""
    counts = {
        "runs lost": len(report.lost),
        "runs doubled": len(report.doubled),
        "completed runs the store forgot": len(report.forgotten),
    }
    out = [
        Row("store_failover", f"{name}: {what}", value, "", target=target, check=zero)
        for what, value in counts.items()
    ]
    out += [
        Row("store_failover", f"{name}: kill -> next started run, p50", p50, "s"),
        Row("store_failover", f"{name}: kill -> next started run, p99", p99, "s"),
    ]
    for row in out:
        print(f"{row.figure}: {row.value:.3g} {row.unit}", file=sys.stderr, flush=True)
    return out


def rows(quick: bool = False) -> list[Row]:
    """Every topology's rows (``quick``: 3 promotions each instead of 20)."""
    out = []
    for label, (synchronous, lag, down) in TOPOLOGIES.items():
        out += measure(label, synchronous, lag, down, 3 if quick else 20)
    return out


def main() -> None:
    """Run every topology and print its rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--promotions", type=int, default=20)
    args = parser.parse_args()
    for label, (synchronous, lag, down) in TOPOLOGIES.items():
        measure(label, synchronous, lag, down, args.promotions)


if __name__ == "__main__":
    main()

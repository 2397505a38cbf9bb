"""Run every benchmark, or a named subset, and print one table.

    python -m bench                       # everything
    python -m bench sqlite redis failover # a subset
    python -m bench --quick               # smaller sizes, for a first look
    python -m bench --write docs/performance.md  # also store the table with the machine

Each name is a module ``bench/bench_<name>.py`` exposing ``rows(quick) -> list[Row]``. A
benchmark whose server does not answer, or which fails, prints why and is left out of the table.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.table import Row, machine, render  # noqa: E402

BENCHES = [
    "sqlite",
    "postgres",
    "redis",
    "nats_kv",
    "claims",
    "celery",
    "dramatiq",
    "failover",
    "scale",
    "soak",
    "redbeat",
    "shared_broker",
    "events",
    "async",
    "metrics",
    "retention",
    "testing",
    "timeline",
    "rabbitmq_consumer",
    "rabbitmq_lost_runs",
    "store_failover",
    "schedules",
    "host_schedules",
    "console",
    "definitions",
    "overdue",
]
QUICK_ARGS = {
    "events": ["-n", "500"],
    "metrics": ["--runs", "500", "--repeat", "1"],
    "retention": ["--seconds", "10"],
    "timeline": ["--runs", "2000"],
    "rabbitmq_consumer": ["-n", "100"],
    "rabbitmq_lost_runs": ["--kills", "5"],
}
"""Arguments for ``--quick`` of benchmarks that print their own figures (no ``rows()`` yet)."""


def main() -> None:
    """Parse the names and flags, run the benchmarks, print (and optionally write) the table."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default all): {BENCHES}")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer rounds")
    parser.add_argument("--write", type=Path, help="write the table and the machine to this file")
    args = parser.parse_args()
    names = [name.replace("-", "_") for name in args.names] or BENCHES
    unknown = sorted(set(names) - set(BENCHES))
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {BENCHES}")
    rows: list[Row] = []
    failed: list[str] = []
    printed: list[str] = []
    started = time.monotonic()
    for name in names:
        print(f"== {name}", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        try:
            module = importlib.import_module(f"bench.bench_{name}")
            with contextlib.redirect_stdout(sys.stderr):  # progress lines; the table is stdout
                if hasattr(module, "rows"):
                    rows += module.rows(quick=args.quick)
                else:
                    run_main(module, QUICK_ARGS.get(name, []) if args.quick else [])
                    printed.append(name)
        except Exception:
            traceback.print_exc()
            failed.append(name)
        print(f"   {name}: {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    host = machine()
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    table = render(rows)
    header = f"Run {stamp} ({'--quick' if args.quick else 'full size'}), "
    header += f"{time.monotonic() - started:.0f} s; machine: {host}"
    print(header)
    print(table)
    if printed:
        print(f"also ran, figures printed above (no table rows yet): {', '.join(printed)}")
    if failed:
        print(f"not measured (see the errors above): {', '.join(failed)}")
    if args.write:
        write(args.write, header, table, failed)


def run_main(module: object, argv: list[str]) -> None:
    """Run a benchmark module's own ``main()`` with ``argv``, as its script would."""
    saved = sys.argv
    sys.argv = [str(getattr(module, "__file__", "bench")), *argv]
    try:
        module.main()  # type: ignore[attr-defined]
    finally:
        sys.argv = saved


def write(path: Path, header: str, table: str, failed: list[str]) -> None:
    """Replace the generated block of ``path`` (between markers), or append one."""
    begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
    block = f"{begin}\n{header}\n\n{table}\n"
    if failed:
        block += f"\nNot measured in this run: {', '.join(failed)}.\n"
    block += end
    text = path.read_text() if path.exists() else ""
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


if __name__ == "__main__":
    main()

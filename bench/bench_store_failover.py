"""The store's own failover, per topology: runs lost and doubled, and the time to the next run.

    python -m bench store_failover [--quick]

Each topology is a module of its own beside this one (``store_failover_<name>.py``, exposing
``rows(quick) -> list[Row]``): it starts its replicated servers on loopback ports, fails them over
while instances run a job every second, and stops them. A topology whose servers cannot be started
here prints why and is left out; the others still run.
"""

from __future__ import annotations

import importlib
import sys
import traceback

from bench.table import Row

TOPOLOGIES = ["redis", "cluster", "postgres", "nats"]
"""Redis primary + replica + three sentinels; Redis Cluster (3 primaries, 3 replicas);
PostgreSQL primary + standby; a three-node NATS cluster."""


def rows(quick: bool) -> list[Row]:
    """Every topology's rows, in order."""
    found: list[Row] = []
    for name in TOPOLOGIES:
        print(f"-- store_failover: {name}", flush=True)
        try:
            module = importlib.import_module(f"bench.store_failover_{name}")
            found += module.rows(quick=quick)
        except Exception:
            traceback.print_exc(file=sys.stdout)
            print(f"-- store_failover: {name} not measured (see above)", flush=True)
    return found


def main() -> None:
    """Print the rows of every topology (``--quick`` for fewer failovers)."""
    from bench.table import render

    print(render(rows(quick="--quick" in sys.argv)))


if __name__ == "__main__":
    main()

"""Where "exactly once" ends: an idempotent payment, a fenced write, and an email that is neither.

A run can be attempted more than once: a runner that dies (or freezes past its lease) is taken over,
and a failed attempt is retried. Relay makes sure only one attempt holds the lease at a time and
gives each a growing fencing token; whether the *effects* happen once is decided where they land:

1. ``charge`` is idempotent: the payment row is keyed by the run id, and the charge and its key
   commit in one transaction. A retried or taken-over run finds the row and charges nothing again.
2. ``publish_report`` is fenced: the report table stores the token that wrote it and refuses a
   writer with an older one, so a runner that wakes up after being replaced cannot overwrite its
   successor's report (``relay.fencing.SQLFence``).
3. ``send_receipt`` cannot be made exactly-once this way. The email provider has no idempotency
   key, so if the runner dies after the provider accepted the message but before the run was
   recorded finished, the next attempt sends it again. Marking "sent" *before* sending would
   instead lose the email on a crash. The only honest options: accept a rare duplicate (as here),
   or use a provider that takes an idempotency key (then it behaves like ``charge``).

    python examples/payments.py    # in several terminals
"""

from __future__ import annotations

import sqlite3

import relay
from relay.fencing import SQLFence

scheduler = relay.Scheduler("sqlite:///relay.db", lease=30, heartbeat=10)


def ledger() -> sqlite3.Connection:
    """The business database (a file here; PostgreSQL works the same way)."""
    conn = sqlite3.connect("ledger.db", timeout=30)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS payments (run_id TEXT PRIMARY KEY, amount_cents INTEGER)"
    )
    return conn


def charge(run: relay.Run, amount_cents: int) -> bool:
    """Record the payment keyed by the run id; ``False`` if this run already paid."""
    with ledger() as conn:  # one transaction: the charge and its idempotency key together
        inserted = conn.execute(
            "INSERT INTO payments (run_id, amount_cents) VALUES (?, ?) "
            "ON CONFLICT (run_id) DO NOTHING",
            (run.id, amount_cents),
        ).rowcount
    return inserted == 1


def publish_report(run: relay.Run, text: str) -> bool:
    """Overwrite the latest report unless a newer attempt already wrote it."""
    return SQLFence.sqlite("ledger.db", table="reports").write("daily", run.token, text)


def send_receipt(run: relay.Run) -> None:
    """At-least-once: a provider without idempotency keys may get this twice after a crash."""
    print(f"emailing the receipt for {run.id}")


@scheduler.job(cron="* * * * *", max_attempts=3, stale_after=300)
def bill(run: relay.Run) -> None:
    """Charge once per run, publish a fenced report, then (at least once) email a receipt."""
    if charge(run, amount_cents=1999):
        print(f"charged for {run.id}")
    publish_report(run, f"billed {run.id} with token {run.token}")
    send_receipt(run)


if __name__ == "__main__":
    scheduler.run()

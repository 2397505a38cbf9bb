"""Code mypy must reject: each line marked ``# E`` must get an error (tests/typing checks it)."""

from __future__ import annotations

import relay
from relay.backends.sqlite_claim import SQLiteClaimBackend

claims = relay.Scheduler(SQLiteClaimBackend("claims.db"))
relay.Scheduler(SQLiteClaimBackend("claims.db"), lease=30)  # E
relay.Scheduler(SQLiteClaimBackend("claims.db"), heartbeat=10)  # E
claims.job(every=60, overlap="skip")  # E
claims.job(every=60, max_attempts=3)  # E
claims.job(every=60, catch_up=3600)  # E
claims.job(every=60, expect_success_within=600)  # E
claims.job(every=60, alert_after_failures=3)  # E
relay.Scheduler("sqlite:///relay.db").job(every=60, overlap="sometimes")  # E
relay.Scheduler("sqlite:///relay.db").job(lambda run: None)  # E

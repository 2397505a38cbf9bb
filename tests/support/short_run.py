"""A scheduler run in the test's own process until its job has run a few times."""

from __future__ import annotations

import time

import relay

__all__ = ["tokens_of_a_few_runs"]


def tokens_of_a_few_runs(url: str, *, lease: float, within: float, runs: int = 3) -> list[int]:
    """Run job ``beat`` (every 0.2 s, overlap skipped, two attempts) on ``url`` until it ran
    ``runs`` times or ``within`` seconds passed; the tokens of its runs, in the order they ran."""
    tokens: list[int] = []
    scheduler = relay.Scheduler(url, lease=lease, heartbeat=1, tick=0.05)

    @scheduler.job(every=0.2, max_attempts=2, overlap="skip", name="beat")
    def beat(run: relay.Run) -> None:
        tokens.append(run.token)

    deadline = time.monotonic() + within
    while len(tokens) < runs and time.monotonic() < deadline:
        scheduler.run_pending()
        time.sleep(0.05)
    scheduler.join(5)
    scheduler.shutdown()
    return tokens

"""The claim contract: every claim backend passes these, unchanged, through the protocol alone."""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from relay import ClaimBackend, open_backend
from tests.support import procs

UTC = timezone.utc
JOB = "claim-job"


# Fixed once, so that every call in a test names the same runs, whatever second it is.
BASE = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)


def slot(index: int) -> datetime:
    """Recent slots, a second apart, in increasing order (stream ids must grow)."""
    return BASE + timedelta(seconds=index)


def test_first_claim_wins_and_later_ones_lose(claim_backend: ClaimBackend) -> None:
    assert claim_backend.claim(JOB, slot(0)) is True
    assert claim_backend.claim(JOB, slot(0)) is False
    assert claim_backend.claim(JOB, slot(0)) is False


def test_runs_are_independent(claim_backend: ClaimBackend) -> None:
    assert claim_backend.claim(JOB, slot(0)) is True
    assert claim_backend.claim(JOB, slot(1)) is True
    assert claim_backend.claim("another-job", slot(1)) is True
    assert claim_backend.claim("another-job", slot(1)) is False


def test_claim_many_answers_each_run_in_order(claim_backend: ClaimBackend) -> None:
    assert claim_backend.claim(JOB, slot(1)) is True
    assert claim_backend.claim_many([(JOB, slot(2)), ("other", slot(2))]) == [True, True]
    assert claim_backend.claim_many([(JOB, slot(2)), (JOB, slot(3))]) == [False, True]


def test_memory_is_declared(claim_backend: ClaimBackend) -> None:
    memory = claim_backend.remembers_for
    assert memory is None or memory > 0
    assert claim_backend.name


def test_close_is_idempotent(claim_url: str) -> None:
    opened = open_backend(claim_url)
    opened.close()
    opened.close()


@pytest.mark.slow
def test_racing_processes_give_one_winner_per_run(claim_url: str) -> None:
    slots = [int(slot(i).timestamp() * 1000) for i in range(500)]
    start_at = time.time() + 4
    workers = [
        procs.spawn(
            "race-claim", {"url": claim_url, "job": JOB, "slots": slots, "start_at": start_at}
        )
        for _ in range(8)
    ]
    for worker in workers:
        assert procs.next_event(worker)["event"] == "ready"
    wins: Counter[int] = Counter()
    for worker in workers:
        wins.update(procs.next_event(worker, timeout=180)["won"])
        procs.finish(worker)
    duplicated = [ms for ms, count in wins.items() if count > 1]
    assert duplicated == []
    assert set(wins) == set(slots)

"""PostgreSQL failed over under real instances: a primary SIGKILLed mid-run, its standby promoted.

Three instance processes run a job every second on the pair's multi-host URL
(``postgresql://a,b/…``, connecting to whichever server takes writes) while the primary is killed
three times, each time with a run in flight and the standby held a second behind. With a
synchronous standby (``require_sync=1``) nothing a handler did is lost or done twice, tokens never
go back, and the next run starts soon after the store is whole again. With an asynchronous standby
held behind, the promotion loses the last commits: the test prints what was forgotten or run
twice, and asserts nothing about it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.pg_server import find_bin
from tests.support.pg_failover import RaceReport, Timing, race
from tests.support.pg_standby import PgPair, pg_pair

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

NEXT_START_BOUND = 10.0
"""Seconds from the pair being whole again (the new standby streaming) to the next run's start.

Measured on the 2-core development machine: 0.3 s at most, often less than nothing (the start
comes before the rebuild is reported), 1.0 to 4.8 s after the kill. The bound leaves room for the
loop's back-off (1, 2, 4 s) on a loaded machine.
"""


def _pair(synchronous: bool) -> Iterator[PgPair]:
    if find_bin() is None:
        reason = "PostgreSQL's initdb, pg_ctl and pg_basebackup are not installed"
        if os.environ.get("RELAY_REQUIRE_SERVICES") == "1":
            pytest.fail(f"RELAY_REQUIRE_SERVICES=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    with pg_pair(synchronous=synchronous) as pair:
        yield pair


@pytest.fixture
def synchronous_pair() -> Iterator[PgPair]:
    yield from _pair(synchronous=True)


@pytest.fixture
def asynchronous_pair() -> Iterator[PgPair]:
    yield from _pair(synchronous=False)


def _summary(report: RaceReport) -> str:
    rounds = ", ".join(
        f"kill->promoted {f.promoted_at - f.killed_at:.2f}s, "
        f"->whole {f.rebuilt_at - f.killed_at:.2f}s, ->next start {f.to_next_start:.2f}s"
        for f in report.failovers
    )
    return (
        f"{len(report.starts())} runs started; rounds: {rounds}; doubled {report.doubled}; "
        f"lost {report.lost}; forgotten by the store {report.forgotten}"
    )


def test_three_promotions_of_a_synchronous_standby_lose_and_double_nothing(
    synchronous_pair: PgPair, tmp_path: Path
) -> None:
    timing = Timing()
    # Each kill comes 1 s after the standby stopped receiving: commits of that second waited
    report = race(synchronous_pair, tmp_path, failovers=3, lag=1.0, timing=timing)
    print(_summary(report))
    assert len(report.failovers) == 3
    assert report.doubled == []  # no handler ran twice
    assert report.unfinished == []  # and each one that started returned
    assert report.lost == []  # every slot ran (those of the outages caught up)
    assert report.forgotten == []  # and the promoted store recorded each one succeeded
    assert report.token_regressions(timing) == []
    tokens = [e["token"] for e in report.executions if "start" in e]
    assert len(tokens) == len(set(tokens))
    for failover in report.failovers:
        assert failover.after_rebuilt <= NEXT_START_BOUND, _summary(report)


def test_an_asynchronous_standby_behind_loses_the_last_commits(
    asynchronous_pair: PgPair, tmp_path: Path
) -> None:
    """The hazard ``require_sync`` refuses, measured: nothing here is asserted about it."""
    timing = Timing()
    report = race(asynchronous_pair, tmp_path, failovers=2, lag=2.0, timing=timing)
    print(f"asynchronous standby 2 s behind, 2 promotions: {_summary(report)}")
    print(f"token regressions: {report.token_regressions(timing)}")
    assert len(report.failovers) == 2  # the race itself ran

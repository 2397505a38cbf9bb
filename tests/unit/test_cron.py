"""The cron dialect: nicknames mean their five fields, and H gives every instance the same slots."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import relay
from relay import InvalidSchedule
from relay.cron import NICKNAMES
from relay.jobs import make_job
from relay.schedules import CronSchedule

UTC = timezone.utc
DAY = (datetime(2026, 11, 29, tzinfo=UTC), datetime(2026, 11, 30, tzinfo=UTC))

# Computes a job's slots for one day in a fresh interpreter, as another instance would.
SLOTS = """
import json, sys
from datetime import datetime, timezone
from relay.schedules import make_schedule
UTC = timezone.utc
after, until = datetime(2026, 11, 29, tzinfo=UTC), datetime(2026, 11, 30, tzinfo=UTC)
schedule = make_schedule(cron=sys.argv[1], every=None, tz="Europe/Paris", job=sys.argv[2])
print(json.dumps([s.isoformat() for s in schedule.slots_between(after, until)]))
"""


def slots_in_a_process(expression: str, job: str, hash_seed: str) -> list[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    out = subprocess.run(
        [sys.executable, "-c", SLOTS, expression, job], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    slots: list[str] = json.loads(out.stdout)
    return slots


@pytest.mark.parametrize("expression", ["H H * * *", "H/15 * * * *", "H(0-29) 3 * * *"])
def test_instances_in_separate_processes_derive_the_same_H_slots(expression: str) -> None:
    """Two processes with different hash seeds (as two hosts have) agree on every slot."""
    first = slots_in_a_process(expression, "nightly-report", "1")
    second = slots_in_a_process(expression, "nightly-report", "2")
    assert first == second and first
    other_job = slots_in_a_process(expression, "refresh-cache", "1")
    assert other_job != first  # H spreads jobs: it hashes on the name


def test_H_hashes_on_the_job_name_given_to_make_job(tmp_path: Path) -> None:
    backend = relay.open_backend(f"sqlite:///{tmp_path / 'r.db'}")
    made = make_job(backend, name="nightly-report", cron="H H * * *")
    direct = CronSchedule("H H * * *", job="nightly-report")
    assert list(made.schedule.slots_between(*DAY)) == list(direct.slots_between(*DAY))
    [slot] = list(direct.slots_between(*DAY))
    assert slot.second == 0  # H hashes minute and hour only: never a seconds field
    backend.close()


@pytest.mark.parametrize("nickname", sorted(NICKNAMES))
def test_nicknames_are_their_five_fields_even_with_a_job_name(nickname: str) -> None:
    """croniter would hash every field of a nickname (seconds included) once given a hash id."""
    named = CronSchedule(nickname, job="nightly-report")
    plain = CronSchedule(NICKNAMES[nickname])
    year = (DAY[0] - timedelta(days=400), DAY[1])
    assert list(named.slots_between(*year)) == list(plain.slots_between(*year))
    assert all(s.minute == 0 and s.second == 0 for s in named.slots_between(*year))


def test_nicknames_ignore_case_and_surrounding_spaces() -> None:
    assert CronSchedule(" @Daily ").latest_slot(DAY[1]) == DAY[1]


@pytest.mark.parametrize("expression", ["* * * * 7", "0 9 * * mon-fri", "0 0 L * *", "0 9 ? * 1"])
def test_five_field_forms_croniter_reads_stay_accepted(expression: str) -> None:
    CronSchedule(expression)


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("*/5 * * * * *", "every="),
        ("0 0 * * * * 2030", "year"),
        ("R 3 * * *", "random"),
        ("61 * * * *", "minute field '61' is out of range (minute takes 0-59)"),
    ],
)
def test_refusals_say_why(expression: str, words: str) -> None:
    with pytest.raises(InvalidSchedule, match="not valid") as caught:
        CronSchedule(expression, job="j")
    assert words in str(caught.value)


@pytest.mark.parametrize(
    ("expression", "job", "first"),
    [
        ("H H * * *", "nightly-report", "00:36"),
        ("H H * * *", "refresh-cache", "09:19"),
        ("H/15 * * * *", "nightly-report", "00:06"),
        ("H/15 * * * *", "refresh-cache", "00:04"),
    ],
)
def test_H_values_are_pinned(expression: str, job: str, first: str) -> None:
    """Instances on different croniter versions must agree: a change of hashing fails here.

    (croniter 6.0.0 and 7.0.0 expand H identically; these values come from both.)
    """
    slot = next(CronSchedule(expression, job=job).slots_between(*DAY))
    assert slot.strftime("%H:%M") == first

"""Job definitions and the rule that picks the one deciding a job (relay.definitions)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from relay.definitions import Definition, deciding, definition_of, release_key
from relay.instances import InstanceInfo
from relay.jobs import Job
from relay.schedules import BoundedSchedule, CronSchedule, EverySchedule, OnceSchedule

UTC = timezone.utc
NOW = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def job(**options: Any) -> Job:
    schedule = options.pop("schedule", CronSchedule("0 9 * * *", "UTC"))
    return Job(name="report", schedule=schedule, **options)


def defined(**options: Any) -> Definition:
    found = definition_of(job(**options))
    assert found is not None
    return found


def test_equal_definitions_hash_equal_and_read_as_their_schedule() -> None:
    assert defined() == defined()
    assert defined().text == "cron '0 9 * * *' (UTC)"
    assert defined(overlap="skip", catch_up=60.0).text == (
        "cron '0 9 * * *' (UTC), overlap=skip, catch_up=60"
    )
    assert len(defined().hash) == 12


@pytest.mark.parametrize(
    "changed",
    [
        {"schedule": CronSchedule("0 10 * * *", "UTC")},
        {"schedule": CronSchedule("0 9 * * *", "Europe/Paris")},
        {"schedule": EverySchedule(60)},
        {"schedule": OnceSchedule(NOW)},
        {"overlap": "skip"},
        {"max_attempts": 1},
        {"catch_up": 30.0},
        {"stale_after": 10.0},
        {"jitter": 5.0},
    ],
)
def test_a_change_of_schedule_or_option_changes_the_hash(changed: dict[str, Any]) -> None:
    assert defined(**changed).hash != defined().hash


def test_the_hash_ignores_the_handler_and_stored_schedules_declare_nothing() -> None:
    assert defined(handler=print) == defined()
    stored = BoundedSchedule(CronSchedule("0 9 * * *", "UTC"), NOW, None)
    assert definition_of(job(schedule=stored)) is None


def test_release_keys_compare_as_numbers() -> None:
    assert release_key("0.10.0") > release_key("0.9.3") > release_key("0.9")
    assert release_key("v0.2.0rc1") == (0, 2, 0)
    assert release_key("unknown") == ()


def instance(
    owner: str,
    digest: str | None,
    *,
    version: str = "0.2.0",
    started: int = 0,
    beat_ago: float = 1.0,
) -> InstanceInfo:
    return InstanceInfo(
        owner=owner, role="scheduler", host="h", pid=1, version=version, interval=10.0,
        started_at=NOW + timedelta(minutes=started), beat_at=NOW - timedelta(seconds=beat_ago),
        definitions={} if digest is None else {"report": digest},
        definition_texts={} if digest is None else {digest: f"text of {digest}"},
    )  # fmt: skip


def test_the_latest_started_instance_decides_within_a_release() -> None:
    fleet = [instance("a", "old", started=0), instance("b", "new", started=5),
             instance("c", "old", started=1)]  # fmt: skip
    choice = deciding(fleet, NOW)["report"]
    assert (choice.definition, choice.owner) == (Definition("new", "text of new"), "b")
    assert choice.others == ((Definition("old", "text of old"), ("c", "a")),)
    assert choice.holders == ("b",)


def test_the_newest_release_decides_before_the_latest_started() -> None:
    fleet = [instance("canary", "new", version="0.3.0", started=0),
             instance("restarted", "old", version="0.2.0", started=9)]  # fmt: skip
    assert deciding(fleet, NOW)["report"].owner == "canary"
    # 0.10 is newer than 0.9: versions compare as numbers, not as text
    fleet = [
        instance("x", "new", version="0.10.0"),
        instance("y", "old", version="0.9.0", started=1),
    ]
    assert deciding(fleet, NOW)["report"].definition.hash == "new"


def test_instances_declaring_nothing_or_dead_take_no_part() -> None:
    fleet = [
        instance("new", "new", started=0),
        instance("v0.1.0", None, version="0.1.0", started=9),  # declares nothing
        instance("dead", "old", started=8, beat_ago=31.0),  # missed three beats of 10 s
    ]
    [(name, choice)] = deciding(fleet, NOW).items()
    assert (name, choice.owner, choice.others) == ("report", "new", ())
    assert deciding([instance("v0.1.0", None, version="0.1.0")], NOW) == {}


def test_ties_on_release_and_start_go_to_the_greatest_owner_on_every_instance() -> None:
    fleet = [instance("a", "one"), instance("b", "two")]
    assert deciding(fleet, NOW)["report"].owner == "b"
    assert deciding(list(reversed(fleet)), NOW)["report"].owner == "b"


def test_only_the_jobs_asked_for_are_decided() -> None:
    assert deciding([instance("a", "one")], NOW, jobs=["other"]) == {}


def test_the_hash_stays_the_same_across_releases() -> None:
    # Pinned: a release that changed these would make every job look changed while it rolls out.
    assert defined().hash == "d13cdea0d148"
    assert defined(schedule=CronSchedule("0 10 * * *", "UTC")).hash == "9f7183096993"
    assert defined(schedule=EverySchedule(60)).hash == "0f08fc42d38e"

"""One django-celery-beat row's columns as a stored schedule's options.

Rows are plain objects with the model's attributes here, for the cases its models refuse to save;
``tests/django_app/test_import_celery_beat.py`` writes real rows through the models."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest

from relay.contrib.django.celery_beat import Unmappable, definition

UTC = timezone.utc


def row(**columns: Any) -> SimpleNamespace:
    """A ``PeriodicTask`` with the model's defaults, an interval of 10 seconds unless told."""
    values: dict[str, Any] = {
        "name": "n", "task": "t", "args": "[]", "kwargs": "{}", "queue": None, "exchange": None,
        "routing_key": None, "priority": None, "headers": None, "expires": None,
        "expire_seconds": None, "one_off": False, "start_time": None, "enabled": True,
        "total_run_count": 0, "description": "",
        "interval": SimpleNamespace(every=10, period="seconds"), "crontab": None, "solar": None,
        "clocked": None,
    }  # fmt: skip
    values.update(columns)
    for kind in ("interval", "crontab", "solar", "clocked"):
        values[f"{kind}_id"] = None if values[kind] is None else 1
    return SimpleNamespace(**values)


def test_publish_options_keep_what_celery_would_send() -> None:
    mapped = definition(row(priority=0, queue="", routing_key="r", headers='{"a": 1}'))
    assert mapped["options"] == {"priority": 0, "routing_key": "r", "headers": {"a": 1}}
    assert mapped["every"] == timedelta(seconds=10) and "max_runs" not in mapped


def test_expires_the_date_first_as_django_celery_beat_does() -> None:
    end = datetime(2031, 1, 1, tzinfo=UTC)
    mapped = definition(row(expires=end, expire_seconds=30))
    assert mapped["end"] == end and mapped["options"] == {"expires": "2031-01-01T00:00:00+00:00"}
    assert definition(row(expire_seconds=30))["options"] == {"expires": 30}


def test_one_off_runs_once_and_once_it_ran_is_disabled() -> None:
    assert definition(row(one_off=True)).items() >= {"max_runs": 1, "enabled": True}.items()
    assert definition(row(one_off=True, total_run_count=1))["enabled"] is False
    at = datetime(2030, 6, 1, tzinfo=UTC)
    clocked = definition(row(interval=None, clocked=SimpleNamespace(clocked_time=at), one_off=True))
    assert clocked["at"] == at and "max_runs" not in clocked and "every" not in clocked


@pytest.mark.parametrize(
    ("columns", "reason"),
    [
        ({"interval": None}, "it has no schedule"),
        ({"clocked": SimpleNamespace(clocked_time=None)}, "it has both interval and clocked"),
        ({"interval": SimpleNamespace(every=0, period="seconds")}, "not a positive number"),
        ({"interval": SimpleNamespace(every=1, period="weeks")}, "not a positive number"),
        ({"kwargs": "[1]"}, "its kwargs '[1]' are not a JSON object"),
        ({"args": '{"a": 1}'}, "are not a JSON list"),
        ({"headers": "{"}, "its headers '{' are not JSON"),
    ],
)
def test_a_row_relay_cannot_express_says_why(columns: dict[str, Any], reason: str) -> None:
    with pytest.raises(Unmappable, match=re.escape(reason)):
        definition(row(**columns))

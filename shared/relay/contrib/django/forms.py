"""The form of a stored schedule in the Django admin.

The form only turns text into values (JSON, durations, ISO times); every rule is Relay's own:
the admin passes the values to :meth:`relay.Control.add_schedule` / ``update_schedule``, and
:meth:`ScheduleForm.add_relay_error` puts the error they raise on the field it names.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from django import forms

from relay.errors import RelayError
from relay.stored import DEFINITION, Schedule

__all__ = ["ScheduleForm", "field_of"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATIONS = ("every", "catch_up", "stale_after", "jitter", "expect_success_within")
_TIMES = ("at", "start", "end")
_JSON = ("args", "kwargs", "options")
_WORDS = {
    "cron expression": "cron", "time zone": "tz", "allows task": "task", "job name": "name",
    "name of a code-defined job": "name",
}  # fmt: skip
"""Words of Relay's messages that name a field without its ``name=``."""


def field_of(message: str, fields: tuple[str, ...]) -> str | None:
    """The field an error message of Relay is about: the first one it names, else ``None``."""
    found: list[tuple[int, str]] = []
    for name in fields:
        hit = re.search(rf"(?<![\w.]){name}=|^{name} ", message)
        if hit:
            found.append((hit.start(), name))
    for words, name in _WORDS.items():
        at = message.find(words)
        if at >= 0 and name in fields:
            found.append((at, name))
    return min(found)[1] if found else None


def _text(text: str) -> str | None:
    return text.strip() or None


class ScheduleForm(forms.Form):
    """A stored schedule's definition as text fields; ``version`` (hidden) is the one edited."""

    name = forms.CharField()
    task = forms.CharField(help_text="A task the instances allow.")
    cron = forms.CharField(required=False, help_text="Five fields, such as 0 3 * * *.")
    tz = forms.CharField(required=False, label="Time zone", help_text="Of cron: Europe/Paris.")
    every = forms.CharField(required=False, help_text="Seconds, or 90s, 15m, 12h, 1d.")
    at = forms.CharField(required=False, help_text="One run at an ISO time with its zone.")
    args = forms.CharField(required=False, initial="[]", help_text="A JSON list.")
    kwargs = forms.CharField(required=False, initial="{}", help_text="A JSON object.")
    enabled = forms.BooleanField(required=False, initial=True)
    start = forms.CharField(required=False, help_text="No slot before this ISO time.")
    end = forms.CharField(required=False, help_text="No slot after this ISO time.")
    max_runs = forms.IntegerField(required=False, help_text="At most this many slots.")
    overlap = forms.ChoiceField(
        choices=[(v, v) for v in ("allow", "skip", "buffer_one")], initial="allow"
    )
    catch_up = forms.CharField(required=False, help_text="Missed slots run this far back.")
    max_attempts = forms.IntegerField(required=False, help_text="Attempts per run.")
    stale_after = forms.CharField(required=False, help_text="Skip a run this late.")
    jitter = forms.CharField(required=False, help_text="Start each slot up to this late.")
    options = forms.CharField(required=False, initial="{}", help_text="Publish options (JSON).")
    expect_success_within = forms.CharField(
        required=False, help_text="Overdue if no run succeeded this long after its slot."
    )
    alert_after_failures = forms.IntegerField(
        required=False, help_text="Failing after this many slots in a row failed."
    )
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    version = forms.IntegerField(required=False, widget=forms.HiddenInput)
    force = forms.BooleanField(
        required=False, label="Store even if no live instance allows the task"
    )

    def __init__(self, *args: Any, editing: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if editing:  # a schedule keeps its name
            self.fields["name"].disabled = True
            self.fields["version"].required = True

    @staticmethod
    def initial_of(schedule: Schedule) -> dict[str, Any]:
        """The form's initial values for ``schedule``, as its fields spell them."""
        values: dict[str, Any] = {"name": schedule.name, "version": schedule.version}
        for name in DEFINITION:
            value = getattr(schedule, name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif name in _JSON:
                value = json.dumps(list(value) if name == "args" else dict(value))
            elif isinstance(value, float):
                value = f"{value:g}"
            values[name] = value if value is not None else ""
        return values

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        for name in _DURATIONS:
            cleaned[name] = self._convert(name, cleaned.get(name), _duration)
        for name in _TIMES:
            cleaned[name] = self._convert(name, cleaned.get(name), _instant)
        for name in _JSON:
            cleaned[name] = self._convert(name, cleaned.get(name), _json)
        for name in ("cron", "tz"):
            cleaned[name] = _text(cleaned.get(name) or "")
        return cleaned

    def _convert(self, name: str, text: Any, convert: Any) -> Any:
        if not isinstance(text, str) or not text.strip():
            return None
        try:
            return convert(text.strip())
        except ValueError as exc:
            self.add_error(name, str(exc))
            return None

    def definition(self) -> dict[str, Any]:
        """The cleaned definition: the keyword arguments ``add_schedule`` takes (but ``name``)."""
        return {name: self.cleaned_data.get(name) for name in DEFINITION}

    def add_relay_error(self, exc: RelayError) -> None:
        """Show ``exc`` on the field it is about, or above the form."""
        field = field_of(str(exc), tuple(n for n in self.fields if n not in ("version", "force")))
        self.add_error(field, str(exc))


def _duration(text: str) -> float:
    """Seconds from ``3600``, ``90s``, ``15m``, ``12h`` or ``30d`` (as ``relay schedules``)."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    try:
        return float(number) * _UNITS[unit]
    except ValueError:
        raise ValueError(
            f"{text!r} is not a duration: use seconds or a number with s, m, h or d, such as 15m"
        ) from None


def _instant(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not an ISO 8601 time, such as 2026-11-01T00:00:00+00:00"
        ) from None
    if value.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone: add Z or +01:00")
    return value


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise ValueError(f"{text!r} is not JSON") from None

"""The console's forms: text in, values out, with the ``relay`` command's own parsers.

A form turns text into values only, and through the very functions the ``relay`` command uses
(:func:`relay.cli._options.duration`, :func:`~relay.cli._options.instant`, the converters of
``relay schedules add``), so a bad value gets the message the command would print. Every rule is
:class:`relay.Control`'s: its error is shown on the form and nothing is written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl

import click
from starlette.requests import Request

from relay.cli._options import duration, instant
from relay.cli.schedules import _FIELDS
from relay.stored import DEFINITION, Schedule

__all__ = ["Form", "read_form", "schedule_form", "schedule_values"]

_CONVERTERS = {name: convert for name, convert, _ in _FIELDS}
LONGEST = 64 * 1024
"""The largest form body read."""


@dataclass
class Form:
    """A form's text fields, and the errors found in them (by field; ``""``: the whole form)."""

    data: dict[str, str]
    errors: dict[str, str] = field(default_factory=dict)

    def get(self, name: str, default: str = "") -> str:
        """The field's text, stripped."""
        return self.data.get(name, default).strip()

    def error(self, name: str, message: str) -> None:
        """Note ``message`` on field ``name`` (the first error of a field is kept)."""
        self.errors.setdefault(name, message)

    @property
    def ok(self) -> bool:
        """No error found."""
        return not self.errors


async def read_form(request: Request) -> Form:
    """The URL-encoded body of a POST (the console's forms send nothing else)."""
    body = await request.body()
    if len(body) > LONGEST:
        return Form({}, {"": f"the form is larger than {LONGEST} bytes"})
    pairs = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
    return Form(dict(pairs))


def parse(form: Form, name: str, convert: Any, option: str) -> Any:
    """``convert(text, option)`` of field ``name`` (``None`` when blank); a bad value's error,
    as the command words it, goes on the field."""
    text = form.get(name)
    if not text:
        return None
    try:
        return convert(text, option)
    except click.BadParameter as exc:
        form.error(name, exc.format_message())
    except ValueError:
        form.error(name, f"Invalid value for {option}: {text!r} is not a whole number")
    return None


def when(form: Form, name: str, option: str) -> datetime | None:
    """An ISO time with a zone, as ``relay backfill --start`` reads it."""
    value: datetime | None = parse(form, name, instant, option)
    return value


def seconds(form: Form, name: str, option: str) -> float | None:
    """A duration, as ``relay resume --window`` reads it."""
    value: float | None = parse(form, name, duration, option)
    return value


def schedule_values(form: Form) -> dict[str, Any]:
    """The definition a schedule form gives (every field, blank ones ``None``), as
    ``relay schedules add`` would read the same text; errors go on the form."""
    values: dict[str, Any] = {}
    for name in DEFINITION:
        if name == "task":
            values[name] = form.get("task")
        elif name == "enabled":
            values[name] = form.get("enabled") == "on"
        else:
            option = f"--{name.replace('_', '-')}"
            values[name] = parse(form, name, _CONVERTERS[name], option)
    for name, empty in (("args", ()), ("kwargs", {}), ("options", {})):
        if values.get(name) is None:
            values[name] = empty
    if values.get("description") is None:
        values["description"] = ""
    if not values["task"]:
        form.error("task", "Missing argument 'TASK': name the task the schedule runs")
    return values


def schedule_form(schedule: Schedule | None) -> Form:
    """The form's text for ``schedule`` (a new one's defaults when ``None``)."""
    if schedule is None:
        return Form({"args": "[]", "kwargs": "{}", "options": "{}", "enabled": "on"})
    data = {"name": schedule.name, "version": str(schedule.version)}
    for name in DEFINITION:
        value = getattr(schedule, name)
        if name == "enabled":
            data[name] = "on" if value else ""
        elif isinstance(value, datetime):
            data[name] = value.isoformat()
        elif name in ("args", "kwargs", "options"):
            data[name] = json.dumps(list(value) if name == "args" else dict(value))
        elif isinstance(value, float):
            data[name] = f"{value:g}"
        else:
            data[name] = "" if value is None else str(value)
    return Form(data)

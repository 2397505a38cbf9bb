"""The one rule for wrong arguments of Relay's Python API, and the limits every store shares.

Every public call checks its arguments here, before any store is touched, and refuses a wrong
one with :class:`~relay.errors.InvalidArgument` naming the parameter, what it got and what it
takes. The same input gets the same answer on every store: a value Relay could have checked is
never reported as the store being down. The limits (``docs/reference.md``, "Limits"):

* a **name** (job, stored schedule, task): a non-empty string of at most :data:`NAME_MAX`
  characters, printable, without ``@``;
* **who** made a change (``by``): at most :data:`BY_MAX` characters; a **reason**: at most
  :data:`REASON_MAX`; neither holds a NUL character (PostgreSQL cannot store one);
* a stored schedule's definition: at most :data:`DEFINITION_MAX` bytes of JSON;
* counts (``limit``, ``count``, ``version``) are ``int`` (not ``bool``) in their range; durations
  are finite numbers of seconds; instants are aware ``datetime`` objects.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from relay.errors import InvalidArgument

__all__ = [
    "BY_MAX",
    "DEFINITION_MAX",
    "NAME_MAX",
    "REASON_MAX",
    "aware",
    "count",
    "name",
    "seconds",
    "text",
]

NAME_MAX = 200
"""The most characters of a job's, a stored schedule's or a task's name."""
BY_MAX = 200
"""The most characters of ``by``, who made a change."""
REASON_MAX = 1000
"""The most characters of a pause's reason."""
DEFINITION_MAX = 65536
"""The most bytes of a stored schedule's definition as JSON (its arguments and options)."""


def name(value: Any, parameter: str) -> str:
    """A name: a non-empty, printable string of at most :data:`NAME_MAX` characters, no ``@``."""
    if not isinstance(value, str):
        raise InvalidArgument(parameter, value, "a name (a string)")
    if not value or "@" in value or not value.isprintable() or len(value) > NAME_MAX:
        raise InvalidArgument(
            parameter, value,
            f"a non-empty name of at most {NAME_MAX} characters, without '@' or control characters",
        )  # fmt: skip
    return value


def text(value: Any, parameter: str, most: int, *, empty: bool = True) -> str:
    """A free text (``by``, a reason) of at most ``most`` characters, without NUL."""
    if not isinstance(value, str):
        raise InvalidArgument(parameter, value, "a string")
    if "\x00" in value or len(value) > most or (not empty and not value):
        what = "a non-empty string" if not empty else "a string"
        raise InvalidArgument(parameter, value, f"{what} of at most {most} characters, no NUL")
    return value


def count(value: Any, parameter: str, least: int = 1, most: int | None = None) -> int:
    """A whole number from ``least`` to ``most`` (an ``int``, not a ``bool`` or a string)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(parameter, value, "a whole number (int)")
    if value < least or (most is not None and value > most):
        bound = f"from {least} to {most}" if most is not None else f"of at least {least}"
        raise InvalidArgument(parameter, value, f"a whole number {bound}")
    return value


def seconds(value: Any, parameter: str, *, zero: bool = True) -> float:
    """A finite number of seconds (``0`` allowed when ``zero``), not ``bool``, NaN or infinite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(parameter, value, "a number of seconds")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        least = "0 or more" if zero else "more than 0"
        raise InvalidArgument(parameter, value, f"a finite number of seconds, {least}")
    return float(value)


def aware(value: Any, parameter: str) -> datetime:
    """An aware ``datetime`` (a naive one is another time on each host)."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidArgument(
            parameter,
            value,
            "an aware datetime, such as datetime(2026, 11, 1, tzinfo=timezone.utc)",
        )
    return value

"""What every ``relay`` command takes: the one ``--backend`` option (default:
``$RELAY_BACKEND``), the one error boundary (a :class:`~relay.errors.RelayError` leaves as its
message, which names the fix, and exit status 1), and the parsers of option values.

Every option value is parsed by one of the types here (or a click type), so that a wrong value
is refused before anything is opened, with exit status 2 and a message naming the option:
:class:`Duration` (finite, within :data:`relay.durations.MAX_SECONDS`, never NaN, with a floor
where a smaller one would spin a core), :class:`Instant`, :class:`Since`, :class:`InputFile`,
:class:`OutputFile` (a file to write, in a folder that exists) and :func:`count` (a whole number
within bounds).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from relay.durations import MAX_SECONDS
from relay.errors import RelayError

__all__ = [
    "Duration",
    "InputFile",
    "Instant",
    "OutputFile",
    "RelayGroup",
    "Since",
    "backend_option",
    "count",
    "duration",
    "instant",
    "integer",
    "json_option",
    "writing",
]

F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:  # generic from click 8.2; the oldest click supported (8.1.2) is not
    _ParamType = click.ParamType[Any, Any]
else:
    _ParamType = click.ParamType


class RelayGroup(click.Group):
    """A command group whose commands' Relay errors become a one-line message and exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a :class:`RelayError` (its message names the fix) exits with 1."""
        try:
            return super().invoke(ctx)
        except RelayError as exc:
            raise click.ClickException(str(exc)) from None


def _need_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    if not value:
        raise click.UsageError(
            "no backend: pass --backend URL or set RELAY_BACKEND, e.g. sqlite:///relay.db", ctx
        )
    return value


def backend_option(command: F) -> F:
    """``--backend URL`` (default: ``$RELAY_BACKEND``), passed to the command as ``url``."""
    return click.option(
        "--backend",
        "url",
        envvar="RELAY_BACKEND",
        show_envvar=True,
        callback=_need_url,
        help="Backend URL, e.g. sqlite:///relay.db (default: $RELAY_BACKEND).",
    )(command)


def json_option(text: str) -> Callable[[F], F]:
    """``--json``, passed as ``as_json``; ``text`` says what is printed."""
    return click.option("--json", "as_json", is_flag=True, help=text)


def instant(text: str, option: str) -> datetime:
    """An ISO 8601 time with a zone, given to ``option``."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not an ISO 8601 time, such as 2026-11-01T00:00:00Z", param_hint=[option]
        ) from None
    if value.tzinfo is None:
        raise click.BadParameter(f"{text!r} has no time zone: add Z or +01:00", param_hint=[option])
    return value


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str, option: str, floor: float = 0.0, why: str = "") -> float:
    """Seconds from ``3600``, ``90s``, ``15m``, ``12h`` or ``30d``, given to ``option``: a number,
    not negative, at most a century (:data:`relay.durations.MAX_SECONDS`, as everywhere in
    Relay), and, with ``floor``, at least that (``why`` says what a shorter one breaks)."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        value = math.nan
    if math.isnan(value):
        raise click.BadParameter(
            f"{text!r} is not a duration: use seconds or a number with s, m, h or d, such as 30d",
            param_hint=[option],
        )
    least = f"{floor:g}" if floor else "0"
    if value < floor:
        reason = f"below {least}s: {why}" if floor and value >= 0 else "negative"
        raise click.BadParameter(f"{text!r} is {reason}; use {least} or more", param_hint=[option])
    if value > MAX_SECONDS:
        raise click.BadParameter(
            f"{text!r} is more than a century; use a shorter duration, such as 30d",
            param_hint=[option],
        )
    return value


class Duration(_ParamType):
    """An option's duration in seconds (see :func:`duration`): ``floor`` is its least value."""

    name = "duration"

    def __init__(self, floor: float = 0.0, why: str = "") -> None:
        self.floor = floor
        self.why = why

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        """Seconds, or a usage error naming the option."""
        if isinstance(value, float | int) and not isinstance(value, bool):
            value = repr(value)  # a default given as a number
        return duration(str(value), _hint(param), self.floor, self.why)


class Instant(_ParamType):
    """An option's ISO 8601 time with a zone (see :func:`instant`)."""

    name = "time"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime:
        """The time, or a usage error naming the option."""
        return value if isinstance(value, datetime) else instant(str(value), _hint(param))


class Since(_ParamType):
    """``--since``: ``90s``, ``15m``, ``2h``, ``7d`` or an ISO 8601 time, checked when parsed and
    kept as text (the command reads it against the store's clock with
    :func:`relay.timeline.parse_since`)."""

    name = "since"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """The text, once :func:`~relay.timeline.parse_since` accepts it."""
        from relay.timeline.model import parse_since

        try:
            parse_since(str(value), datetime.now(timezone.utc))
        except RelayError as exc:
            raise click.BadParameter(str(exc).removeprefix("--since "), ctx, param) from None
        return str(value)


class InputFile(click.Path):
    """A file a command reads: it exists, is not a folder, and may be read."""

    def __init__(self) -> None:
        super().__init__(exists=True, dir_okay=False, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The path, or a usage error saying what is wrong with it."""
        if "\0" in str(value):
            self.fail(f"{str(value)!r} is not a file name", param, ctx)
        path = super().convert(value, param, ctx)
        if not os.path.isfile(path):  # a device or a pipe could be read for ever
            self.fail(f"{str(value)!r} is not a regular file: give a YAML or JSON file", param, ctx)
        return path


class OutputFile(_ParamType):
    """A file a command writes: not a folder, in a folder that exists and may be written."""

    name = "file"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        """The path, or a usage error saying what is wrong with it."""
        text = os.fspath(value)
        if not text or "\0" in str(text):
            self.fail(f"{text!r} is not a file name", param, ctx)
        try:
            return self._checked(Path(text), text, param, ctx)
        except OSError as exc:  # a name too long for the file system, a loop of links...
            shown = text if len(text) <= 80 else f"{text[:80]}..."
            self.fail(f"{shown!r} cannot be used: {exc.strerror or exc}", param, ctx)

    def _checked(
        self, path: Path, text: str, param: click.Parameter | None, ctx: click.Context | None
    ) -> Path:
        if path.is_dir():
            self.fail(f"{text!r} is a folder: name a file in it", param, ctx)
        folder = path.absolute().parent
        if not folder.is_dir():
            self.fail(f"folder {str(folder)!r} does not exist: create it first", param, ctx)
        if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            self.fail(f"{text!r} cannot be written here (permission denied)", param, ctx)
        return path


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """Around a write to ``path``: an error of the file system (a full disk, a folder that
    refuses new files) leaves as a one-line message and exit status 1."""
    try:
        yield
    except OSError as exc:
        raise click.ClickException(
            f"cannot write {str(path)!r}: {exc.strerror or exc}; choose another file"
        ) from None


def integer(text: str, option: str) -> int:
    """A whole number given to ``option`` (its range is checked where it is used)."""
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a whole number", param_hint=[option]) from None


def count(low: int, high: int) -> click.IntRange:
    """A whole number from ``low`` to ``high``: beyond ``high`` a store cannot answer usefully."""
    return click.IntRange(low, high)


def _hint(param: click.Parameter | None) -> str:
    if param is None:
        return "value"
    opts = getattr(param, "opts", None) or [param.name or "value"]
    return str(opts[0])

"""What every ``relay`` command takes: the one ``--backend`` option (default:
``$RELAY_BACKEND``), the one error boundary (a :class:`~relay.errors.RelayError` leaves as its
message, which names the fix, and exit status 1), and the parsers of option values."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import click

from relay.errors import RelayError

__all__ = ["RelayGroup", "backend_option", "duration", "instant", "json_option"]

F = TypeVar("F", bound=Callable[..., Any])


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
            f"{text!r} is not an ISO 8601 time, such as 2026-11-01T00:00:00Z", param_hint=option
        ) from None
    if value.tzinfo is None:
        raise click.BadParameter(f"{text!r} has no time zone: add Z or +01:00", param_hint=option)
    return value


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str, option: str) -> float:
    """Seconds from ``3600``, ``90s``, ``15m``, ``12h`` or ``30d``, given to ``option``."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a duration: use seconds or a number with s, m, h or d, such as 30d",
            param_hint=option,
        ) from None
    if value < 0:
        raise click.BadParameter(f"{text!r} is negative", param_hint=option)
    return value

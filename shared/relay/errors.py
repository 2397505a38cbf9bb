"""Every error Relay raises, in one tree.

::

    RelayError
    ├── ConfigurationError          bad options; raised when a job or scheduler is created
    │   ├── InvalidSchedule         a cron expression or interval that cannot be used
    │   ├── UnknownBackend          a backend URL whose scheme Relay does not know
    │   ├── UnsupportedOption       a lease-only option given to a claim backend
    │   ├── MissingDependency       the backend's driver is not installed (names the extra)
    │   ├── InvalidArgument         a wrong argument of a public call (names the parameter)
    │   └── UnknownSchedule         no stored schedule has this name
    └── BackendError                the store misbehaved or refused
        ├── BackendUnavailable      the store cannot be reached, or refused our credentials
        │   └── NotAcknowledged     the primary did the write, but too few replicas confirmed
        │                           it in time: the step counts as not done
        ├── StoreNotFound           a read-only open found no store where the URL points
        ├── MigrationRequired       the schema is missing or older than this Relay needs, and
        │   │                       this user may not change it: run `relay migrate` as its owner
        │   └── StoreTooOld         the store's layout is older than this Relay can use, and
        │                           this instance may not migrate it (names the command)
        ├── StoreTooNew             the store's layout needs a newer Relay than this one
        │                           (also a ConfigurationError): upgrade Relay
        ├── InstancesTooOld         `relay migrate --contract` refused: a live instance runs a
        │                           Relay older than the floor the contraction sets (names it)
        └── LeaseLost               the lease is no longer ours: a newer token exists,
                                    or the run already finished
    Conflict                        a stored schedule changed since the version a change was
                                    based on (or its name is taken): re-read it and try again

Drivers' own exceptions never leave a backend: each backend translates them at its boundary with
``raise BackendUnavailable(...) from exc``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Protocol

__all__ = [
    "BackendError",
    "BackendUnavailable",
    "ConfigurationError",
    "Conflict",
    "InstancesTooOld",
    "InvalidArgument",
    "InvalidSchedule",
    "LeaseLost",
    "MigrationRequired",
    "MissingDependency",
    "NotAcknowledged",
    "RelayError",
    "StoreNotFound",
    "StoreTooNew",
    "StoreTooOld",
    "UnknownBackend",
    "UnknownSchedule",
    "UnsupportedOption",
]


class RelayError(Exception):
    """The root of every error Relay raises."""


class ConfigurationError(RelayError, ValueError):
    """An option or combination of options that cannot work; the message names the fix."""


class InvalidSchedule(ConfigurationError):
    """A cron expression, time zone or interval that cannot be turned into slots."""


class UnknownBackend(ConfigurationError):
    """A backend URL whose scheme (or strategy) Relay does not know."""


class MissingDependency(ConfigurationError, ImportError):
    """The driver a backend needs is not installed; the message names the extra to install."""

    def __init__(self, package: str, extra: str, *, needed_by: str = "this backend") -> None:
        super().__init__(
            f"{needed_by} needs the {package!r} package: pip install 'relay-scheduler[{extra}]'"
        )
        self.package = package
        self.extra = extra


class InvalidArgument(ConfigurationError, TypeError):
    """A wrong type or value for a parameter of a public call, refused before any store is
    touched (:mod:`relay.arguments`): the same answer on every store. ``parameter`` names it."""

    def __init__(self, parameter: str, value: object, expected: str) -> None:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else f"{shown[:57]}..."
        super().__init__(f"{parameter}={shown} is not valid: give {expected}")
        self.parameter = parameter


class UnsupportedOption(ConfigurationError, TypeError):
    """An option only a lease can honour, given to a scheduler or job on a claim backend."""

    def __init__(self, option: str, backend: str, supported_by: Iterable[str]) -> None:
        supported = ", ".join(supported_by)
        super().__init__(
            f"option {option!r} needs a lease backend, but {backend} only answers 'was I first?'. "
            f"Drop {option!r}, or use a lease backend: {supported}"
        )
        self.option = option
        self.backend = backend


class BackendError(RelayError):
    """The store failed or refused an operation."""


class BackendUnavailable(BackendError):
    """The store cannot be reached, or refused the connection; the message says what to check."""


class LeasedRun(Protocol):
    """What :class:`NotAcknowledged` keeps of a run it won (a :class:`relay.Run`): enough to hand
    it back. A protocol, so that this module, which :mod:`relay.runs` builds on, imports nothing."""

    @property
    def id(self) -> str: ...

    @property
    def token(self) -> int: ...


class NotAcknowledged(BackendUnavailable):
    """The store's primary did a write, but fewer replicas than asked confirmed it in time.

    A failover now could lose it, so the step counts as not done: the engine does not start a
    won run it was not acknowledged for (it hands it back, spending no attempt), and it sends a
    finish again until one is acknowledged. The message names the replicas asked for and found.
    """

    def __init__(self, message: str, won: Sequence[LeasedRun] = ()) -> None:
        super().__init__(message)
        self.won = tuple(won)
        """The runs an acquire won on the primary: leased there, to be handed back, not run."""


class StoreNotFound(BackendError):
    """A read-only open found nothing where the URL points: no file, schema, key prefix or bucket.

    Read-only commands (``relay runs``, ``relay instances``, ``relay health``) never create a
    store, so a mistyped URL fails with this instead of creating an empty one. The message names
    what was not found.
    """


class MigrationRequired(BackendError):
    """The store's schema is missing or older than this Relay needs, and this instance may not
    create or upgrade it: its user does not own the schema, or the URL says ``migrate=false``.

    Nothing was changed. Run ``relay migrate --backend URL`` as the schema's owner (the message
    says so), then start the instance again.
    """


class StoreTooOld(MigrationRequired):
    """The store is at a layout older than the oldest this Relay can use, and this instance may
    not bring it forward (``migrate=false``, or a role that does not own the schema).

    Nothing was changed. The message names the layout found, the one needed and ``relay migrate``.
    """


class StoreTooNew(BackendError, ConfigurationError):
    """The store is at a layout a newer Relay made, whose floor (the oldest Relay that can still
    use it) is newer than this Relay: this Relay would misread it, so it stops using it.

    Raised at open, and by the first call that fails in a way the newer layout explains. The
    message reads "schema 'relay' is at layout version 18, made by a newer Relay, which needs
    Relay 0.3 or newer; this is Relay 0.2: upgrade Relay". ``layout`` and ``needs`` hold the
    store's record.
    """

    def __init__(self, store: str, layout: int, needs: str, running: str) -> None:
        super().__init__(
            f"{store} is at layout version {layout}, made by a newer Relay, which needs Relay "
            f"{_short(needs)} or newer; this is Relay {_short(running)}: upgrade Relay "
            "(or point this instance at another store)"
        )
        self.store = store
        self.layout = layout
        self.needs = needs
        self.running = running


class InstancesTooOld(BackendError):
    """``relay migrate --contract`` refused: live instances run a Relay older than the floor the
    contraction would set, and would stop working. Nothing was changed.

    ``instances`` lists them as ``(owner, version)``; the message names each and the fix (upgrade
    or stop them, then contract again).
    """

    def __init__(self, store: str, floor: str, instances: Sequence[tuple[str, str]]) -> None:
        named = ", ".join(f"{owner} (Relay {version})" for owner, version in instances)
        super().__init__(
            f"cannot contract {store}: it would need Relay {floor} or newer, and live instances "
            f"run older Relays: {named}; upgrade or stop them (`relay instances` lists them), "
            "then run `relay migrate --contract` again"
        )
        self.floor = floor
        self.instances = tuple(instances)


def _short(version: str) -> str:
    """``0.3.0`` as ``0.3``: how messages name a release."""
    parts = version.split(".")
    return ".".join(parts[:2]) if parts[2:] in (["0"], []) else version


class LeaseLost(BackendError):
    """The lease is no longer held with this token: a newer token exists or the run is finished.

    The operation that raised it changed nothing.
    """


class UnknownSchedule(ConfigurationError, LookupError):
    """No stored schedule has the name asked for; the message names the stored ones."""

    def __init__(self, message: str, *, name: str | None = None) -> None:
        super().__init__(message)
        self.name = name
        """The schedule asked for, where the raiser knows it."""


class Conflict(RelayError):
    """A stored schedule is not at the version a change expected (or its name is already taken).

    Nothing was changed. ``version``, ``at`` and ``by`` say what the store holds now: read the
    schedule again, and change that version if the change still makes sense.
    """

    def __init__(
        self,
        name: str,
        *,
        version: int,
        at: datetime | None,
        by: str | None,
        expected: int | None = None,
    ) -> None:
        when = "" if at is None else f" at {at.isoformat(timespec='seconds')}"
        who = "" if by is None else f" by {by}"
        if expected is None:
            text = (
                f"schedule {name!r} exists already (version {version}, last changed{when}{who}): "
                "choose another name, or update it with its version"
            )
        else:
            text = (
                f"schedule {name!r} is at version {version} (changed{when}{who}), not {expected}: "
                "read it again and apply the change to the current version"
            )
        super().__init__(text)
        self.name = name
        self.version = version
        self.at = at
        self.by = by
        self.expected = expected

"""Store layouts: the layout a store is at, and the oldest Relay that can still use it.

Every lease store records, beside its data, a :class:`Layout`: its **layout** (an integer each
store counts on its own; PostgreSQL's and SQLite's is their schema version) and **min_relay**, the
oldest Relay that can still use it (the *floor*). Releases change stores by *expand, then
contract*:

* a release's migrations only add (tables, columns, functions, keys), never drop or change what
  the previous release uses, so the floor stays at the previous release (:data:`FLOOR`) and old
  and new instances run side by side during a rolling deploy, or after a rollback;
* ``relay migrate --contract`` removes what only older releases needed, and raises the floor to
  this release (:data:`CONTRACT_FLOOR`), once no live instance runs an older Relay.

An instance checks the record at open (:meth:`Layout.check`): a floor above its own version
raises :class:`~relay.errors.StoreTooNew`; a newer layout whose floor it meets is used as it is
(a newer Relay only added to it). A store without a record is at the layout Relay 0.1 made.

Relay 0.1 knows nothing of this record: it compares its own schema version with the one in
``meta`` (``relay_meta`` on SQLite) and refuses a bigger one. So while a store's floor is 0.1,
that key keeps 0.1's own number (:func:`legacy_version`), and Relay 0.1 goes on using a store a
later release expanded; a contraction writes the real layout there, and Relay 0.1 then refuses
the store at start ("made by a newer Relay").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from relay.errors import StoreTooNew

__all__ = [
    "CONTRACT_FLOOR",
    "FIRST_RELEASE",
    "FLOOR",
    "Layout",
    "LayoutStore",
    "from_json",
    "legacy_version",
    "running",
    "to_json",
    "to_record",
    "unrecorded",
    "version_key",
]

FIRST_RELEASE = "0.1.0"
"""The release before store layouts were recorded: a store without a record is at its layout."""
FLOOR = "0.1.0"
"""The oldest Relay that can use a store this Relay created or expanded: the previous release."""
CONTRACT_FLOOR = "0.2.0"
"""The floor ``relay migrate --contract`` sets: this release."""


def running() -> str:
    """This Relay's version (``relay.__version__``)."""
    from relay import __version__  # relay imports the backends that import this: import late

    return __version__


def version_key(version: str) -> tuple[int, ...]:
    """``"0.2.0"`` as ``(0, 2, 0)``, for comparing; a suffix (``0.3.0rc1``, ``.dev2``) is
    ignored, so a pre-release counts as its release."""
    numbers = []
    for part in version.split("."):
        match = re.match(r"\d+", part)
        if match is None:
            break
        numbers.append(int(match.group()))
        if match.end() != len(part):
            break
    return tuple(numbers)


@dataclass(frozen=True)
class Layout:
    """A store's layout record: its layout number and the oldest Relay that can use it."""

    layout: int
    min_relay: str
    """The floor: the oldest Relay version that can still use the store."""

    def usable(self, version: str | None = None) -> bool:
        """Whether Relay ``version`` (default: this one) may use the store."""
        return version_key(version or running()) >= version_key(self.min_relay)

    def check(self, store: str) -> None:
        """Raise :class:`~relay.errors.StoreTooNew` if this Relay is below the floor; ``store``
        names the store in the message ("schema 'relay'", "Redis prefix 'relay:'")."""
        if not self.usable():
            raise StoreTooNew(store, self.layout, self.min_relay, running())


@runtime_checkable
class LayoutStore(Protocol):
    """A store that keeps a layout record: every lease store (claim stores keep none)."""

    def layout(self) -> Layout | None:
        """The store's record; ``None`` where none was written (Relay 0.1's layout)."""

    def record_layout(self, layout: Layout) -> None:
        """Write the store's record (``relay migrate --contract``)."""


def unrecorded(version: int, own: int) -> Layout:
    """The record of a store known only by its schema ``version`` (none written): Relay 0.1's
    floor up to this Relay's own layout ``own``; above it, a Relay that recorded no floor made
    it, taken to need the release after this one."""
    if version <= own:
        return Layout(version, FIRST_RELEASE)
    major, minor, *_ = (*version_key(running()), 0, 0)
    return Layout(version, f"{major}.{minor + 1}.0")


def legacy_version(layout: int, legacy: int, min_relay: str) -> int:
    """The schema version to keep where Relay 0.1 reads it: its own (``legacy``) while it may
    still use the store, the real ``layout`` once the floor is above it."""
    return legacy if version_key(min_relay) <= version_key(FIRST_RELEASE) else layout


def from_json(data: str | bytes) -> Layout:
    """The record a key-value store keeps as JSON; fields a newer Relay added are ignored."""
    value = json.loads(data)
    return Layout(int(value["layout"]), str(value["min_relay"]))


def to_json(layout: Layout) -> str:
    """The JSON :func:`from_json` reads."""
    return json.dumps({"layout": layout.layout, "min_relay": layout.min_relay})


def to_record(found: Layout | None, own: int) -> Layout | None:
    """The record an instance of this Relay writes at open, given the one ``found`` (``None``:
    none yet) and its own layout ``own``: ``None`` if the store's is at or past it. Migrations
    only add, so the floor stays where it was (:data:`FLOOR` at least)."""
    if found is None:
        return Layout(own, FLOOR)
    if found.layout >= own:
        return None
    return Layout(own, max(FLOOR, found.min_relay, key=version_key))

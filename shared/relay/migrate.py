"""``relay migrate``: create or upgrade the store's schema, as its owner, apart from the instances.

On PostgreSQL the schema's owner runs it once per Relay upgrade (or lets instances that own the
schema migrate at start, as they do unless the URL says ``migrate=false``); instances that run as
a role with only the documented grants then never issue DDL. Other stores are opened as a
scheduler opens them, which creates what they need (SQLite's tables, NATS buckets).

Migrations only add (*expand*, see :mod:`relay.layout`): the previous release keeps working on a
migrated store. :func:`plan` (``relay migrate --plan``) says what a migration would change and
whether the live instances can go on beside it, and changes nothing; :func:`contract`
(``relay migrate --contract``) removes what only older releases needed and raises the store's
floor to this release, refused while a live instance runs an older Relay.
"""

from __future__ import annotations

from relay.backends import Backend, open_backend
from relay.backends._url import BackendURL
from relay.contract import LeaseBackend, is_lease
from relay.errors import ConfigurationError, InstancesTooOld, StoreNotFound, StoreTooNew
from relay.instances import InstanceInfo, is_alive
from relay.layout import CONTRACT_FLOOR, FLOOR, Layout, LayoutStore, running, version_key

__all__ = ["contract", "migrate", "plan"]


def migrate(url: str) -> str:
    """Create or upgrade the schema of the store ``url`` names; what was done, in one line.

    ``migrate=false`` in the URL is ignored here: this is the step it leaves to an owner. Raises
    :class:`~relay.errors.MigrationRequired` when the user may not change the schema, and any
    other :class:`~relay.errors.RelayError` opening the store raises.
    """
    if BackendURL(url).scheme not in ("postgresql", "postgres"):
        backend = _open_to_change(url)
        backend.close()
        return f"{backend.name} is ready: opening it created or upgraded what it needs"
    from relay.backends.postgres import SCHEMA_VERSION, PostgresLeaseBackend

    store = open_backend(url, migrate=True)
    store.close()
    assert isinstance(store, PostgresLeaseBackend)
    found = store.found_version
    if found == SCHEMA_VERSION:
        return f"{store.name} is at schema version {SCHEMA_VERSION} already: nothing to do"
    if found == 0:
        return f"{store.name}: created Relay's schema at version {SCHEMA_VERSION}"
    return f"{store.name}: migrated Relay's schema from version {found} to {SCHEMA_VERSION}"


def plan(url: str) -> str:
    """What ``relay migrate`` would change in the store ``url`` names, and whether each live
    instance's Relay can go on beside it; several lines. Opens the store read-only: creates and
    changes nothing."""
    try:
        backend = open_backend(url, read_only=True)
    except StoreNotFound as exc:
        return f"{exc}\n`relay migrate` would create it, usable by Relay {FLOOR} and newer."
    except StoreTooNew as exc:
        return f"this Relay ({running()}) cannot use the store: {exc}"
    try:
        _refuse_claim(backend, "--plan")
        assert isinstance(backend, LayoutStore) and is_lease(backend)
        found = backend.layout() or Layout(1, FLOOR)
        own, steps = _own_layout(backend, found.layout)
        after = Layout(max(own, found.layout), max(FLOOR, found.min_relay, key=version_key))
        lines = [f"{backend.name}: at layout {found.layout}, {_usable(found)}."]
        if own > found.layout:
            lines.append(f"`relay migrate` (Relay {running()}) brings it to layout {own}, adding:")
            lines += [f"  {step}" for step in steps] or ["  (the layout record only)"]
            lines.append(f"It stays {_usable(after)}: migrations only add.")
        else:
            lines.append(f"Nothing to migrate: this Relay ({running()}) uses layout {own}.")
        lines += _beside(_live(backend), after)
        return "\n".join(lines)
    finally:
        backend.close()


def contract(url: str) -> str:
    """Remove what only Relays older than this one needed from the store ``url`` names, and raise
    its floor to this release; what was done, in one line.

    Raises :class:`~relay.errors.InstancesTooOld`, changing nothing, while a live instance runs a
    Relay older than :data:`~relay.layout.CONTRACT_FLOOR` (named, with its version).
    """
    backend = _open_to_change(url)
    try:
        _refuse_claim(backend, "--contract")
        assert isinstance(backend, LayoutStore) and is_lease(backend)
        older = [i for i in _live(backend) if _older(i.version, CONTRACT_FLOOR)]
        if older:
            raise InstancesTooOld(
                backend.name, CONTRACT_FLOOR, [(i.owner, i.version) for i in older]
            )
        contracting = getattr(backend, "contract", None)
        if contracting is not None:  # PostgreSQL: statements, under the schema's lock
            removed: list[str] = contracting()
        else:  # nothing to remove from the other stores in this release: raise the floor
            removed, found = [], backend.layout() or Layout(1, FLOOR)
            own, _ = _own_layout(backend, found.layout)
            backend.record_layout(Layout(max(own, found.layout), CONTRACT_FLOOR))
    finally:
        backend.close()
    what = f"removed {len(removed)} object(s)" if removed else "nothing to remove in this release"
    return (
        f"{backend.name}: {what}; it now needs Relay {CONTRACT_FLOOR} or newer "
        "(older instances refuse it at start)"
    )


def _refuse_claim(backend: Backend, flag: str) -> None:
    """A :class:`ConfigurationError` for a claim store: it keeps no layout, so ``relay migrate
    --plan`` and ``--contract`` have nothing to read or change there."""
    if is_lease(backend):
        return
    name = getattr(backend, "name", "this store")
    raise ConfigurationError(
        f"relay migrate {flag} works on a lease store; {name} is a claim store, which keeps no "
        "layout and needs no migration"
    )


def _live(backend: LeaseBackend) -> list[InstanceInfo]:
    now = backend.now()
    return [i for i in backend.instances() if is_alive(i, now)]


def _older(version: str, floor: str) -> bool:
    return version_key(version) < version_key(floor)


def _usable(layout: Layout) -> str:
    return f"usable by Relay {layout.min_relay} and newer"


def _beside(live: list[InstanceInfo], after: Layout) -> list[str]:
    """One line per live instance: whether its Relay can go on beside the migrated store, and
    whether a later ``--contract`` would be refused because of it."""
    if not live:
        return ["No live instance recorded a heartbeat."]
    lines = ["Live instances:"]
    for info in live:
        verdict = (
            "can go on beside it"
            if after.usable(info.version)
            else f"cannot: it needs Relay {after.min_relay}"
        )
        if after.usable(info.version) and _older(info.version, CONTRACT_FLOOR):
            verdict += f" (`--contract` waits until it runs Relay {CONTRACT_FLOOR} or newer)"
        lines.append(f"  {info.role} {info.owner} on {info.host}, Relay {info.version}: {verdict}")
    return lines


def _open_to_change(url: str) -> Backend:
    """The store ``url`` names, opened to be changed: ``migrate=false`` in the URL is the step
    left to ``relay migrate``, so it does not apply here."""
    parsed = BackendURL(url)
    takes_migrate = parsed.scheme in ("postgresql", "postgres") or (
        parsed.scheme == "sqlite" and parsed.option("strategy", "lease") == "lease"
    )
    return open_backend(url, migrate=True) if takes_migrate else open_backend(url)


def _own_layout(backend: object, found: int) -> tuple[int, list[str]]:
    """This Relay's layout for ``backend``'s kind of store, and the steps from ``found`` to it."""
    own = int(getattr(backend, "LAYOUT", 1))
    if type(backend).__name__ == "PostgresLeaseBackend":
        from relay.backends._postgres_schema import migrations_after

        return own, migrations_after(found)
    if type(backend).__name__ == "SQLiteLeaseBackend":
        from relay.backends.sqlite import _MIGRATIONS

        steps = range(found + 1, own + 1)
        return own, [f"version {v}: {statement}" for v in steps for statement in _MIGRATIONS[v]]
    return own, [f"layout {v}" for v in range(found + 1, own + 1)]

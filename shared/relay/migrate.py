"""``relay migrate``: create or upgrade the store's schema, as its owner, apart from the instances.

On PostgreSQL the schema's owner runs it once per Relay upgrade (or lets instances that own the
schema migrate at start, as they do unless the URL says ``migrate=false``); instances that run as
a role with only the documented grants then never issue DDL. Other stores are opened as a
scheduler opens them, which creates what they need (SQLite's tables, NATS buckets).
"""

from __future__ import annotations

from relay.backends import open_backend
from relay.backends._url import BackendURL

__all__ = ["migrate"]


def migrate(url: str) -> str:
    """Create or upgrade the schema of the store ``url`` names; what was done, in one line.

    ``migrate=false`` in the URL is ignored here: this is the step it leaves to an owner. Raises
    :class:`~relay.errors.MigrationRequired` when the user may not change the schema, and any
    other :class:`~relay.errors.RelayError` opening the store raises.
    """
    if BackendURL(url).scheme not in ("postgresql", "postgres"):
        backend = open_backend(url)
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

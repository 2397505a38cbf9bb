"""``RELAY = {"BACKEND": "django"}``: the project's own database as Relay's store.

Relay keeps its tables in the database ``DATABASES["default"]`` names (another alias with
``"django://ALIAS"``), through its own backend and schema, never through Django's ORM: on
PostgreSQL in the schema ``relay`` (``"django://default?schema=jobs"`` for another), on SQLite in
the same file. Query options after the alias are passed on to Relay's backend URL.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from relay.errors import ConfigurationError

__all__ = ["LIBPQ_OPTIONS", "backend_url", "is_django_backend", "resolve"]

LIBPQ_OPTIONS = (
    "sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword", "application_name",
    "connect_timeout", "options", "target_session_attrs", "passfile", "service", "sslcrl",
)  # fmt: skip
"""``DATABASES[...]["OPTIONS"]`` keys passed on to Relay's PostgreSQL URL (libpq's own)."""


def is_django_backend(value: object) -> bool:
    """Whether a ``BACKEND`` setting names the project's database: ``django`` or ``django://…``."""
    return isinstance(value, str) and (value == "django" or value.startswith("django://"))


def resolve(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` (a ``RELAY`` dict) with a ``django`` backend replaced by its Relay URL."""
    out = dict(values)
    for key, value in values.items():
        if str(key).upper() == "BACKEND" and is_django_backend(value):
            out[key] = backend_url(value)
    return out


def backend_url(value: str = "django") -> str:
    """The Relay URL of the Django database ``value`` names (``django`` or ``django://ALIAS``)."""
    from django.conf import settings  # this module is only used inside a Django project

    parts = urlsplit(value if "://" in value else "django://default")
    alias = parts.netloc or "default"
    databases = getattr(settings, "DATABASES", {})
    if alias not in databases:
        raise ConfigurationError(
            f"settings.RELAY['BACKEND'] is {value!r} but DATABASES has no {alias!r} entry; "
            f"known: {', '.join(databases) or 'none'}"
        )
    db = databases[alias]
    engine = str(db.get("ENGINE", ""))
    if engine.endswith(("postgresql", "postgis", "postgresql_psycopg2")):
        url = _postgres_url(db)
    elif engine.endswith("sqlite3"):
        url = _sqlite_url(db, alias)
    else:
        raise ConfigurationError(
            f"settings.RELAY['BACKEND'] = {value!r} needs DATABASES[{alias!r}] on PostgreSQL or "
            f"SQLite, not {engine or 'no ENGINE'}; set RELAY['BACKEND'] to a backend URL instead, "
            "such as 'redis://localhost:6379/0'"
        )
    if parts.query:
        url += ("&" if "?" in url else "?") + parts.query
    return url


def _postgres_url(db: Mapping[str, Any]) -> str:
    user = quote(str(db.get("USER") or ""), safe="")
    password = quote(str(db.get("PASSWORD") or ""), safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = str(db.get("HOST") or "")
    if host.startswith("/"):  # a Unix socket folder: libpq's host option, not the URL's host
        options: dict[str, str] = {"host": host}
        hosts = ""
    else:
        options = {}
        hosts = _host_list(host, str(db.get("PORT") or ""))
    for key, option in dict(db.get("OPTIONS") or {}).items():
        if key in LIBPQ_OPTIONS:
            options[key] = str(option)
    query = f"?{urlencode(options)}" if options else ""
    return f"postgresql://{auth}{hosts}/{quote(str(db.get('NAME') or ''), safe='')}{query}"


def _host_list(host: str, port: str) -> str:
    """``host:port``, or ``a:p1,b:p2`` for libpq's lists (``HOST="a,b"``, ``PORT="p1,p2"`` or one
    port for all), as a multi-host URL names them."""
    hosts, ports = host.split(","), port.split(",")
    if len(ports) == 1:
        ports *= len(hosts)
    if len(ports) != len(hosts):
        raise ConfigurationError(
            f"DATABASES HOST {host!r} names {len(hosts)} hosts but PORT {port!r} gives "
            f"{len(ports)} ports; give one port for all hosts, or one per host"
        )
    return ",".join(
        (f"[{h}]" if ":" in h else h) + (f":{p}" if p else "")
        for h, p in zip(hosts, ports, strict=True)
    )


def _sqlite_url(db: Mapping[str, Any], alias: str) -> str:
    name = str(db.get("NAME") or "")
    if not name or name == ":memory:" or name.startswith("file:"):
        raise ConfigurationError(
            f"DATABASES[{alias!r}] is an in-memory SQLite database: processes cannot share it; "
            "give it a file NAME, or set RELAY['BACKEND'] to 'sqlite:////path/to/relay.db'"
        )
    return f"sqlite:///{Path(name).absolute()}"  # absolute: sqlite:////abs/path

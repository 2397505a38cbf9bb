"""Relay's web console: see, pause, resume, trigger, backfill and edit stored schedules from a
browser, for apps with or without Django (``pip install relay-scheduler[console]``).

``relay console --backend URL`` serves it; :func:`asgi_app` mounts it in a FastAPI or Starlette
app, :func:`wsgi_app` in a Flask or Django one, under any path. Pages are rendered on the server
(Starlette, Jinja2) and kept live by one small script of the package's own: no build step,
nothing fetched from elsewhere at run time. Every page reads, and every action writes, through
:class:`relay.Control` and the timeline model, as the ``relay`` command does: the console owns
no rule of its own.

Secure by default (:mod:`relay.console.security`): without an auth hook it answers loopback
clients only; changes need the session cookie and its CSRF token; the hook decides reading and
writing separately; no page shows the store URL's password.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra installs them
    raise ImportError(
        "relay.console needs Starlette and Jinja2: pip install 'relay-scheduler[console]'"
    ) from exc

from relay.console.security import Auth, Viewer, check_listen

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from relay.contract import LeaseBackend

__all__ = ["Auth", "Viewer", "asgi_app", "check_listen", "wsgi_app"]

REFRESH = 2.0
"""Seconds between two polls of a live page part."""


def asgi_app(
    backend: str | LeaseBackend,
    *,
    auth: Auth | None = None,
    secret: str | None = None,
    https_only: bool = False,
    refresh: float = REFRESH,
    title: str = "Relay",
) -> Starlette:
    """The console as an ASGI application over ``backend`` (a lease store's URL, or an open
    lease backend, which stays the caller's).

    ``auth(request)`` returns the :class:`Viewer` (``None``: not signed in); without it only
    loopback clients are answered. ``secret`` signs the session cookie (default: a random one,
    so sessions end with the process; give one when several processes serve the console).
    ``https_only`` marks the cookie secure. Mount it under any path::

        app.mount("/relay", relay.console.asgi_app("postgresql://…", auth=my_auth))
    """
    from relay.console.app import Console, build
    from relay.console.routes import ROUTES

    console = Console(backend, auth, refresh, title)
    return build(console, ROUTES, secret=secret, https_only=https_only)


def wsgi_app(backend: str | LeaseBackend, **options: Any) -> Any:
    """:func:`asgi_app` for a WSGI host (Flask, Django), through a2wsgi's ``ASGIMiddleware``.

    Mount it with the host's own dispatcher, e.g. werkzeug's ``DispatcherMiddleware`` in Flask."""
    try:
        from a2wsgi import ASGIMiddleware
    except ImportError:  # pragma: no cover - the extra installs it
        from relay.errors import ConfigurationError

        raise ConfigurationError(
            "wsgi_app needs a2wsgi: pip install 'relay-scheduler[console]'"
        ) from None
    return ASGIMiddleware(asgi_app(backend, **options))  # type: ignore[arg-type]

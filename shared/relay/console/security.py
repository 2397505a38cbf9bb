"""Who may use the console, and how a change proves it came from the console's own page.

An **auth hook** is a function of the request that returns a :class:`Viewer` (or ``None``: not
signed in, 401). It decides reading and writing separately (:attr:`Viewer.read`,
:attr:`Viewer.write`); the viewer's name is recorded as ``by`` of each change, as
``"name (console)"`` (the Django admin records ``"name (Django admin)"``).

Without a hook the console answers **loopback clients only** (``127.0.0.1``, ``::1``), as the
user running it (``user@host``, as the ``relay`` command records), and
:func:`check_listen` refuses to serve it on any other address.

Every change is a POST that needs the session cookie and the CSRF token the console put in the
session and in its own forms; a cross-site form, or a request without the cookie, is refused (403).
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from starlette.exceptions import HTTPException
from starlette.requests import Request

from relay.control_schedules import operator
from relay.errors import ConfigurationError

__all__ = ["Auth", "Viewer", "check_listen", "csrf_token", "is_loopback", "require", "verify_csrf"]


@dataclass(frozen=True)
class Viewer:
    """Who uses the console, as the auth hook says; ``name`` is recorded as ``by``."""

    name: str
    read: bool = True
    """May see the pages."""
    write: bool = False
    """May pause, resume, trigger, backfill and change stored schedules."""

    @property
    def by(self) -> str:
        """What a change records as ``by``."""
        return f"{self.name} (console)"


Auth = Callable[[Request], "Viewer | None"]
"""An auth hook: the request's viewer, or ``None`` if nobody is signed in."""


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (an address or ``localhost``) is this machine's loopback."""
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_listen(host: str, auth: Auth | None) -> None:
    """Refuse to serve the console on a non-loopback ``host`` without an auth hook."""
    if auth is None and not is_loopback(host):
        raise ConfigurationError(
            f"the console would listen on {host!r} with no auth hook, so anyone who reaches it "
            "could pause and trigger jobs: listen on 127.0.0.1 (the default), or pass an auth "
            "hook (relay console --auth module:function, or asgi_app(..., auth=...))"
        )


def viewer_of(request: Request, auth: Auth | None) -> Viewer | None:
    """The request's viewer: the hook's answer, or (no hook) the local user for loopback
    clients and nobody for the others."""
    if auth is not None:
        return auth(request)
    client = request.client.host if request.client else None
    return Viewer(operator(), read=True, write=True) if is_loopback(client) else None


def require(request: Request, auth: Auth | None, *, write: bool = False) -> Viewer:
    """The viewer, if they may read (or, with ``write``, change); else 401 or 403."""
    viewer = viewer_of(request, auth)
    if viewer is None:
        detail = "sign in first" if auth is not None else "the console answers loopback only"
        raise HTTPException(401 if auth is not None else 403, detail)
    if not viewer.read or (write and not viewer.write):
        raise HTTPException(403, f"{viewer.name} may not {'change' if write else 'see'} this")
    return viewer


def csrf_token(request: Request) -> str:
    """The session's CSRF token, made on first use: every form of the console carries it."""
    token = request.session.get("csrf")
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        request.session["csrf"] = token
    return token


def verify_csrf(request: Request, sent: str | None) -> None:
    """Refuse (403) a change whose form does not carry the session's CSRF token."""
    token = request.session.get("csrf")
    if not isinstance(token, str) or not sent or not hmac.compare_digest(token, sent):
        raise HTTPException(
            403, "no valid CSRF token: changes are made from the console's own pages"
        )

"""The console as one Starlette application: its store, its templates, its routes.

The store is opened once per application: read-only for the pages (a URL that names no store
shows the error and creates nothing), and writable on the first change. Every call to it runs in
a worker thread, as the ``relay`` command's would, through :class:`relay.Control`.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from relay.backends import open_backend
from relay.console.security import Auth, Viewer, csrf_token, require, verify_csrf
from relay.contract import ClaimBackend, LeaseBackend, is_lease
from relay.control import Control
from relay.errors import ConfigurationError

__all__ = ["Console", "build"]

HERE = Path(__file__).resolve().parent
T = TypeVar("T")


class Console:
    """What every page and action shares: the store, the auth hook, the templates."""

    def __init__(
        self, backend: str | LeaseBackend, auth: Auth | None, refresh: float, title: str
    ) -> None:
        self._source = backend
        self._lock = threading.Lock()
        self._reader: LeaseBackend | None = None if isinstance(backend, str) else backend
        self._writer: LeaseBackend | None = self._reader
        self.auth = auth
        self.refresh = refresh
        self.title = title
        self.templates = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.filters["path"] = _path_part
        self.templates.filters["t"] = _time

    # -- the store -------------------------------------------------------------------------

    def _open(self, writable: bool) -> LeaseBackend:
        with self._lock:
            if writable and self._writer is None:
                self._writer = _lease(open_backend(str(self._source)))
            if not writable and self._reader is None:
                self._reader = _lease(open_backend(str(self._source), read_only=True))
            found = self._writer if writable else self._reader
            assert found is not None
            return found

    async def read(self, call: Callable[[Control], T]) -> T:
        """``call(control)`` on the store opened read-only, in a worker thread."""
        return await run_in_threadpool(lambda: call(Control(self._open(False))))

    async def write(self, call: Callable[[Control], T]) -> T:
        """``call(control)`` on the store opened for writing, in a worker thread."""
        return await run_in_threadpool(lambda: call(Control(self._open(True))))

    def close(self) -> None:
        """Close the stores this console opened (a backend object passed in stays open)."""
        if not isinstance(self._source, str):
            return
        for backend in {id(b): b for b in (self._reader, self._writer) if b}.values():
            backend.close()
        self._reader = self._writer = None

    # -- answers ---------------------------------------------------------------------------

    def viewer(self, request: Request, *, write: bool = False) -> Viewer:
        """The request's viewer, if they may read (or write); else 401 / 403."""
        return require(request, self.auth, write=write)

    async def change(self, request: Request, sent: str | None) -> Viewer:
        """The viewer of a change: allowed to write, with the session's CSRF token."""
        viewer = self.viewer(request, write=True)
        verify_csrf(request, sent)
        return viewer

    def render(
        self,
        request: Request,
        template: str,
        *,
        fragment: str | None = None,
        status: int = 200,
        **context: Any,
    ) -> Response:
        """A page, or (``?fragment=1``) its live part alone, with an ETag of its bytes: a
        poll that sends the same ETag back gets 304 and no body."""
        viewer = context.pop("viewer", None) or self.viewer(request)
        root = request.scope.get("root_path", "")
        polled = fragment is not None and bool(request.query_params.get("fragment"))
        shared = {
            "request": request, "viewer": viewer, "root": root, "title": self.title,
            "csrf": csrf_token(request), "refresh": self.refresh,
            "flashes": [] if polled else request.session.pop("flash", []),
        }  # fmt: skip
        part, etag = "", ""
        if fragment is not None:
            part = self.templates.get_template(fragment).render(**shared, **context)
            etag = '"' + hashlib.sha256(part.encode()).hexdigest()[:32] + '"'
            if polled:
                if request.headers.get("if-none-match") == etag:
                    return Response(status_code=304, headers={"ETag": etag})
                return HTMLResponse(part, headers={"ETag": etag, "Cache-Control": "no-store"})
        live = request.url.include_query_params(fragment="1")
        html = self.templates.get_template(template).render(
            **shared, live_url=f"{live.path}?{live.query}", live_part=part,
            live_etag=etag, **context,
        )  # fmt: skip
        return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})

    @staticmethod
    def done(request: Request, to: str, *messages: tuple[str, str]) -> Response:
        """After a change: flash ``messages`` (kind, text) and go to ``to`` (303)."""
        request.session.setdefault("flash", [])
        request.session["flash"] = [*request.session["flash"], *messages]
        return RedirectResponse(request.scope.get("root_path", "") + to, status_code=303)


class _Headers:
    """Every answer refuses framing and scripts from elsewhere, and leaks no address; a poll's
    answer sets no cookie."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A poll's answer never sets the session cookie: one in flight while a form is sent
        # would put back the session the form's answer just changed (its message, its token).
        polled = b"fragment=1" in scope.get("query_string", b"")

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                if polled:
                    message["headers"] = [
                        (k, v) for k, v in message["headers"] if k.lower() != b"set-cookie"
                    ]
                message["headers"] += [
                    (b"content-security-policy", _CSP),
                    (b"x-frame-options", b"DENY"),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin"),
                ]
            await send(message)

        await self.app(scope, receive, with_headers)


_CSP = (
    b"default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self'; "
    b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""Only the console's own script runs; the timeline's drawing keeps its inline style."""


def build(
    console: Console, routes: list[BaseRoute], *, secret: str | None, https_only: bool
) -> Starlette:
    """The Starlette application of ``console``: its routes, the static files, sessions."""
    static = Mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app = Starlette(
        routes=[*routes, static],
        middleware=[
            Middleware(_Headers),
            Middleware(
                SessionMiddleware,
                secret_key=secret or secrets.token_urlsafe(32),
                session_cookie="relay_console",
                same_site="strict",
                https_only=https_only,
            ),
        ],
    )
    app.state.console = console
    return app


def _lease(backend: ClaimBackend | LeaseBackend) -> LeaseBackend:
    if not is_lease(backend):
        backend.close()
        raise ConfigurationError(
            f"{backend.name} is a claim backend: it keeps no runs to show; the console needs a "
            "lease store (sqlite, postgresql, redis, nats)"
        )
    return backend


def _time(value: datetime | None) -> str:
    """A time as the pages show it: UTC, to the second (blank for none)."""
    if value is None:
        return ""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _path_part(value: object) -> str:
    """A name as one part of a URL path (``/`` and every other special character quoted)."""
    from urllib.parse import quote

    return quote(str(value), safe="")

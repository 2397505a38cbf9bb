"""``relay console``: serve the web console (:mod:`relay.console`) with uvicorn."""

from __future__ import annotations

import importlib
from typing import Any

import click

from relay.cli._options import backend_option
from relay.errors import ConfigurationError

__all__ = ["console"]


def _hook(text: str | None) -> Any:
    """The auth hook ``module:function`` names, imported."""
    if not text:
        return None
    module, _, name = text.partition(":")
    if not module or not name:
        raise click.BadParameter(f"{text!r} is not module:function", param_hint="--auth")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise click.BadParameter(f"cannot import {text!r}: {exc}", param_hint="--auth") from None


@click.command()
@backend_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8790, show_default=True, help="Port to listen on.")
@click.option(
    "--auth",
    "auth",
    default=None,
    help="An auth hook, module:function: the request's Viewer, or None. Needed off loopback.",
)
@click.option("--secret", envvar="RELAY_CONSOLE_SECRET", default=None,
              help="Signs the session cookie (default: random per start). "
                   "Default: $RELAY_CONSOLE_SECRET.")  # fmt: skip
def console(url: str, host: str, port: int, auth: str | None, secret: str | None) -> None:
    """Serve the web console: jobs, runs, stored schedules, instances, the live timeline; pause,
    resume, trigger, backfill and edit from a browser.

    It listens on loopback unless told otherwise, and refuses another address without --auth.

    \b
    Example:
      relay console --backend sqlite:///relay.db --port 8790
    """
    try:
        import uvicorn

        from relay.console import asgi_app, check_listen
    except ImportError as exc:
        raise ConfigurationError(
            f"relay console needs {exc.name or 'its extra'}: pip install 'relay-scheduler[console]'"
        ) from None
    hook = _hook(auth)
    check_listen(host, hook)
    app = asgi_app(url, auth=hook, secret=secret)
    click.echo(f"Relay console on http://{host}:{port}/ (Ctrl-C stops it)")
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        app.state.console.close()

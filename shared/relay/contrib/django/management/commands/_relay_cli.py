"""Management commands that run a ``relay`` command on the store ``settings.RELAY`` names."""

from __future__ import annotations

import argparse
from typing import Any

import click
from django.core.management.base import BaseCommand, CommandError, CommandParser

from relay.contrib.django.store import backend_url
from relay.errors import RelayError

__all__ = ["RelayCLICommand"]


class RelayCLICommand(BaseCommand):
    """``manage.py relay_X [OPTIONS]`` is ``relay X --backend <settings.RELAY's> [OPTIONS]``."""

    relay_command = ""

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parse_known = parser.parse_known_args

        def parse_args(args: Any = None, namespace: Any = None) -> argparse.Namespace:
            # Options Django does not know are the relay command's: pass them on untouched.
            known, rest = parse_known(args, namespace)
            known.relay_args = rest
            return known  # type: ignore[no-any-return]

        parser.parse_args = parse_args
        command = f"relay {self.relay_command}"
        parser.epilog = f"Other options go to `{command}` (see `{command} --help`)."
        return parser

    def handle(self, *args: Any, **options: Any) -> None:
        from relay.cli import main

        try:
            url = backend_url()
        except RelayError as exc:
            raise CommandError(f"settings.RELAY: {exc}") from None
        if self.relay_command not in main.commands:
            raise CommandError(
                f"this Relay has no `relay {self.relay_command}` command (it comes with the "
                "control plane, relay.Control): upgrade relay-scheduler"
            )
        argv = [self.relay_command, "--backend", url, *options.get("relay_args", []), *args]
        try:
            main.main(argv, prog_name=f"manage.py relay_{self.relay_command}",
                      standalone_mode=False)  # fmt: skip
        except click.exceptions.Exit as exc:
            if exc.exit_code:
                raise SystemExit(exc.exit_code) from None
        except click.ClickException as exc:
            raise CommandError(exc.format_message()) from None

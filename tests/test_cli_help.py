"""Every ``relay`` command's help shows an example, and every command takes the same one
``--backend`` option."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from relay.cli import main


def commands(group: click.Group = main, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of every command and group under ``group``, the group itself first."""
    yield path
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name)


def test_the_walk_finds_the_commands_and_subcommands() -> None:
    found = set(commands())
    assert {(), ("runs",), ("migrate",), ("doctor",), ("schedules",), ("schedules", "add")} <= found
    assert len(found) > 20


@pytest.mark.parametrize("path", list(commands()), ids=lambda p: " ".join(p) or "relay")
def test_every_commands_help_shows_an_example_of_itself(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*path, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.output.splitlines()]
    assert "Example:" in lines, result.output
    example = lines[lines.index("Example:") + 1]
    assert example.startswith(" ".join(("relay", *path))), example
    if path:  # a command's own example runs that command, not another one beginning like it
        words = example.split()
        assert words[: len(path) + 1] == ["relay", *path], example


def test_every_command_takes_the_one_backend_option() -> None:
    (first,) = options_of(("runs",))
    assert (first.name, first.envvar) == ("url", "RELAY_BACKEND")
    takers = [path for path in commands() if options_of(path)]
    for path in takers:
        (option,) = options_of(path)
        assert (option.name, option.envvar, option.callback, option.help) == (
            first.name, first.envvar, first.callback, first.help,
        ), path  # fmt: skip
    assert len(takers) > 15, takers


def options_of(path: tuple[str, ...]) -> list[click.Option]:
    """The ``--backend`` options of the command at ``path``."""
    command: click.Command = main
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return [p for p in command.params if isinstance(p, click.Option) and "--backend" in p.opts]


def test_python_dash_m_relay_cli_is_the_relay_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "relay.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "relay runs --backend" in done.stdout and "schedules" in done.stdout

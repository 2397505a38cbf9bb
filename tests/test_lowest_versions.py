"""``tests/lowest-versions.txt`` pins every dependency a user installs with Relay at its floor.

``tox -e lowest`` runs the suite with those pins. A floor in ``pyproject.toml`` that nobody ran
is a promise nobody checked: this keeps the file and the floors one list.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PINS = ROOT / "tests" / "lowest-versions.txt"
OUTSIDE_ALL = ("testing", "yaml")
"""User extras that ``[all]`` leaves out; with those it names, what a user installs Relay with (the
test, docs and dev tools are the project's own)."""
UNPINNED = {"typing-extensions": "the suite's FastAPI, pydantic and mypy need 4.16 or newer"}
"""Floors the suite cannot run at, and why."""


def declared_floors() -> dict[str, Version]:
    """Each dependency of the package and its user extras, with the lowest version allowed."""
    if sys.version_info < (3, 11):
        pytest.skip("reads pyproject.toml with tomllib (Python 3.11+)")
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    lines = list(project["dependencies"])
    for extra in (*Requirement(extras["all"][0]).extras, *OUTSIDE_ALL):
        lines += extras[extra]
    floors: dict[str, Version] = {}
    for line in lines:
        requirement = Requirement(line)
        if requirement.name == "relay-scheduler":
            continue
        lowest = [s.version for s in requirement.specifier if s.operator == ">="]
        assert lowest, f"{line!r} in pyproject.toml names no lowest version (>=)"
        floors[canonicalize_name(requirement.name)] = Version(lowest[0])
    return floors


def pinned() -> dict[str, Version]:
    """The versions ``tests/lowest-versions.txt`` pins."""
    pins: dict[str, Version] = {}
    for line in PINS.read_text().splitlines():
        line = line.partition("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def test_every_declared_floor_is_pinned_at_that_version() -> None:
    floors, pins = declared_floors(), pinned()
    assert {name: pins.get(name) for name in floors if name not in UNPINNED} == {
        name: floor for name, floor in floors.items() if name not in UNPINNED
    }


def test_tox_runs_the_suite_with_the_pins() -> None:
    tox = (ROOT / "tox.ini").read_text()
    assert "[testenv:lowest]" in tox and "tests/lowest-versions.txt" in tox

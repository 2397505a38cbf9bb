"""Every package in the checkout is listed in pyproject.toml, so a wheel holds all of Relay.

An editable install (``.[dev]``, as the suite runs) imports any folder it finds, so a new package
missing from ``[tool.setuptools] packages`` only breaks real installs; this catches it at once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip(
    "tomllib", reason="tomllib is in the standard library from Python 3.11"
)

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_with_code_is_listed_in_pyproject() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = set()
    for base in (ROOT / "shared", ROOT):
        for init in base.glob("relay*/**/__init__.py"):
            found.add(".".join(init.parent.relative_to(base).parts))
    found = {
        name for name in found if name.split(".")[0] in {"relay", "relay_celery", "relay_dramatiq"}
    }
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"

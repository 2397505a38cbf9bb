"""The documentation site builds with ``mkdocs build --strict``, offline, into a folder of files."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None
    or importlib.util.find_spec("mkdocstrings_handlers") is None,
    reason="mkdocs and mkdocstrings are not installed: pip install -e '.[docs]'",
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line]
    assert done.returncode == 0 and not warnings, done.stderr
    return out


def test_the_reference_is_generated_from_the_code(site: Path) -> None:
    page = (site / "reference.html").read_text(encoding="utf-8")
    for name in [
        "relay.Scheduler",
        "relay.errors.LeaseLost",
        "relay.contract.LeaseBackend",
        "relay.events.RunTakenOver",
        "relay.fencing.SQLFence",
        "relay_celery.RelayScheduler",
        "relay_dramatiq.periodic",
    ]:
        assert f'id="{name}"' in page, f"{name} is missing from the generated reference"
    # A docstring's text appears, so the page is not an empty shell of headings.
    assert "The root of every error Relay raises." in page
    assert ":class:" not in page and ":func:" not in page  # docs/hooks/sphinx_roles.py


def test_every_page_of_the_nav_is_built(site: Path) -> None:
    for page in ["index", "tutorial", "deployment", "semantics", "migrate/redbeat", "reference"]:
        assert (site / f"{page}.html").is_file(), page


def test_the_site_loads_nothing_from_the_network(site: Path) -> None:
    remote = re.compile(r"""<(?:link|script|img)[^>]+(?:href|src)=["'](?:https?:)?//""")
    for page in site.rglob("*.html"):
        found = remote.search(page.read_text(encoding="utf-8"))
        assert found is None, f"{page.relative_to(site)} loads {found.group(0)}"

"""The previous release, installed once per test run and shared by pytest-xdist's workers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.upgrade.previous import Release, install, previous_release


@pytest.fixture(scope="session")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Release:
    """The previous release (``previous_release.txt``), installed into a venv of its own.

    Under pytest-xdist each worker's temporary root is a folder of the run's, so the parent is
    shared by every worker: the first one builds the venv there and the others reuse it.
    ``RELAY_TEST_PREVIOUS_HOME`` keeps it in a folder of your choice across runs instead.
    """
    release = previous_release()
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return install(release, Path(os.environ.get("RELAY_TEST_PREVIOUS_HOME") or shared))

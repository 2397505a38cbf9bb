"""The suite's hooks; its shared fixtures are in ``tests/fixtures.py``, loaded below."""

from __future__ import annotations

import os

import pytest

from tests.support import services

pytest_plugins = ["tests.fixtures"]


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (the default): twice the cores, 4 to 8 workers.

    The suite waits on real processes and servers far more than it computes (a serial run keeps
    the load under 1 on two cores), so more workers than cores is what makes it fast.
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` overrides; ``-n 0`` runs in one process.
    """
    if wanted := os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(wanted)
    return min(8, max(4, 2 * (os.cpu_count() or 1)))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests first (a stable sort), so that xdist starts the longest ones early.

    xdist hands tests out in collection order: slow modules collected last (the install lines,
    the real-process tests) ran on at the end while the other workers sat idle. With ``--dist
    worksteal`` (pyproject.toml) a worker that runs out takes half of another's queue; under
    ``--dist load`` the slow tests sat in three workers' first batches while the fourth ran
    everything else and then waited (2026-12-03: workers done at 483, 635, 700 and 776 s, against
    651 to 672 s with worksteal).
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _services(request: pytest.FixtureRequest) -> None:
    """A test marked with a service needs it: skip it (or fail in CI) when the server is down."""
    for name in services.SERVICES:
        if request.node.get_closest_marker(name) is not None:
            services.require(name)

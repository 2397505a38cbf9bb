"""Fixtures shared by every test: one fresh backend URL per test, per backend."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import services
from tests.support.backends import CLAIM_BACKENDS, LEASE_BACKENDS, params


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (the default): twice the cores, 4 to 8 workers.

    The suite waits on real processes and servers far more than it computes (a serial run keeps
    the load under 1 on two cores), so more workers than cores is what makes it fast.
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` overrides; ``-n 0`` runs in one process.
    """
    if wanted := os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(wanted)
    return min(8, max(4, 2 * (os.cpu_count() or 1)))


@pytest.fixture(autouse=True)
def _services(request: pytest.FixtureRequest) -> None:
    """A test marked with a service needs it: skip it (or fail in CI) when the server is down."""
    for name in services.SERVICES:
        if request.node.get_closest_marker(name) is not None:
            services.require(name)


@pytest.fixture(params=params(LEASE_BACKENDS))
def lease_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL to a fresh lease store, once per lease backend."""
    factory, _ = LEASE_BACKENDS[request.param]
    with factory(tmp_path) as url:
        yield url


@pytest.fixture(params=params(CLAIM_BACKENDS))
def claim_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL to a fresh claim store, once per claim backend."""
    factory, _ = CLAIM_BACKENDS[request.param]
    with factory(tmp_path) as url:
        yield url

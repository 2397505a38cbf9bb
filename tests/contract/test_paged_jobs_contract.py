"""The optional paged read of jobs (:class:`relay.contract.PagedJobs`): every lease backend that
has ``job_page`` and ``job_infos`` says of each job what ``jobs()`` says, a page at a time."""

from __future__ import annotations

import json

import pytest

from relay import LeaseBackend
from relay.contract import PagedJobs, pages_jobs

SPEC = json.dumps({"every": 60, "schedule": "every 60s"})
NAMES = ["a/1", "b-<x>", "b-y", "c", "é"]


def paged(backend: LeaseBackend) -> PagedJobs:
    if not pages_jobs(backend):
        pytest.skip(f"{backend.name} reads every job at once (no job_page)")
    return backend


def test_pages_and_lookups_say_what_jobs_says(lease_backend: LeaseBackend) -> None:
    store = paged(lease_backend)
    store.register_jobs({name: SPEC for name in NAMES})
    assert store.pause("b-y", "why <not>", "ann")
    every = store.jobs()
    assert [i.name for i in every] == sorted(NAMES)

    assert store.job_page(limit=100) == every
    assert store.job_page(limit=2) == every[:2]
    assert store.job_page(after=every[1].name, limit=2) == every[2:4]
    assert store.job_page(after=every[-1].name) == []
    assert store.job_page(prefix="b-", limit=100) == every[1:3]
    assert store.job_page(after="b-<x>", prefix="b-") == every[2:3]
    assert store.job_page(prefix="é") == every[4:] and store.job_page(prefix="z") == []

    found = store.job_infos(["c", "nope", "b-y"])
    assert found == [every[2], every[3]] and found[0].paused_reason == "why <not>"
    assert store.job_infos([]) == []

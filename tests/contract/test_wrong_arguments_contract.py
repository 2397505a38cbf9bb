# ruff: noqa: E501  (a table: one wrong input a line)
"""One rule for wrong arguments of the Python API, the same on every lease backend.

A table of wrong inputs, each run against every lease store through :class:`relay.Control`: each
raises :class:`relay.InvalidArgument` naming the parameter, before the store is touched (the
backend is wrapped to record every call Control makes to it: none). No wrong input may surface
as a store error (``BackendError``, "check that the server is up") or as a Python error of
another kind (``AttributeError``, ``OverflowError``, ``TypeError`` from a driver).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

import pytest

from relay import Control, InvalidArgument, LeaseBackend, open_backend
from relay.arguments import BY_MAX, DEFINITION_MAX, NAME_MAX, REASON_MAX

UTC = timezone.utc
NAN, INF = float("nan"), float("inf")
LONG = "x" * 10_000
START = datetime(2026, 11, 1, tzinfo=UTC)

Call = Callable[[Control], object]
# (what, the call, the parameter it must name)
WRONG: list[tuple[str, Call, str]] = [
    ("runs(limit='ten')", lambda c: c.runs(limit="ten"), "limit"),  # type: ignore[arg-type]
    ("runs(limit=0)", lambda c: c.runs(limit=0), "limit"),
    ("runs(limit=-1)", lambda c: c.runs(limit=-1), "limit"),
    ("runs(limit=True)", lambda c: c.runs(limit=True), "limit"),
    ("runs(limit=10**9)", lambda c: c.runs(limit=10**9), "limit"),
    ("runs(limit=2.5)", lambda c: c.runs(limit=2.5), "limit"),  # type: ignore[arg-type]
    ("runs(job=12345)", lambda c: c.runs(job=12345), "job"),  # type: ignore[arg-type]
    ("runs(job='')", lambda c: c.runs(job=""), "job"),
    ("runs(job='a@b')", lambda c: c.runs(job="a@b"), "job"),
    ("runs(job=10 KB)", lambda c: c.runs(job=LONG), "job"),
    ("runs(job=NUL)", lambda c: c.runs(job="a\x00b"), "job"),
    ("next_runs(count='5')", lambda c: c.next_runs("nightly", "5"), "count"),  # type: ignore[arg-type]
    ("next_runs(count=0)", lambda c: c.next_runs("nightly", 0), "count"),
    ("next_runs(count=10**6)", lambda c: c.next_runs("nightly", 10**6), "count"),
    ("next_runs(count=True)", lambda c: c.next_runs("nightly", True), "count"),
    ("next_runs(job=None)", lambda c: c.next_runs(None), "job"),  # type: ignore[arg-type]
    ("job(None)", lambda c: c.job(None), "name"),  # type: ignore[arg-type]
    ("job(1)", lambda c: c.job(1), "name"),  # type: ignore[arg-type]
    ("job('')", lambda c: c.job(""), "name"),
    ("job(10 KB)", lambda c: c.job(LONG), "name"),
    ("pause(reason=NUL)", lambda c: c.pause("nightly", "a\x00b"), "reason"),
    ("pause(reason=10 KB)", lambda c: c.pause("nightly", LONG), "reason"),
    ("pause(reason=5)", lambda c: c.pause("nightly", 5), "reason"),  # type: ignore[arg-type]
    ("pause(by=NUL)", lambda c: c.pause("nightly", by="a\x00b"), "by"),
    ("pause(by=10 KB)", lambda c: c.pause("nightly", by=LONG), "by"),
    ("pause(by=7)", lambda c: c.pause("nightly", by=7), "by"),  # type: ignore[arg-type]
    ("pause(job=10 KB)", lambda c: c.pause(LONG), "job"),
    ("resume(missed='later')", lambda c: c.resume("nightly", missed="later"), "missed"),  # type: ignore[arg-type]
    ("resume(missed=None)", lambda c: c.resume("nightly", missed=None), "missed"),  # type: ignore[arg-type]
    ("resume(window=nan)", lambda c: c.resume("nightly", missed="catch_up", window=NAN), "window"),
    ("resume(window=inf)", lambda c: c.resume("nightly", missed="catch_up", window=INF), "window"),
    ("resume(window=-1)", lambda c: c.resume("nightly", missed="catch_up", window=-1), "window"),
    ("resume(window=0)", lambda c: c.resume("nightly", missed="catch_up", window=0), "window"),
    ("resume(window='5')", lambda c: c.resume("nightly", missed="catch_up", window="5"), "window"),  # type: ignore[arg-type]
    ("resume(window=True)", lambda c: c.resume("nightly", missed="catch_up", window=True), "window"),
    ("trigger(overlap='never')", lambda c: c.trigger("nightly", overlap="never"), "overlap"),  # type: ignore[arg-type]
    ("trigger(overlap=None)", lambda c: c.trigger("nightly", overlap=None), "overlap"),  # type: ignore[arg-type]
    ("trigger(job=5)", lambda c: c.trigger(5), "job"),  # type: ignore[arg-type]
    ("backfill(start=str)", lambda c: c.backfill("nightly", "2026-11-01T00:00Z", START), "start"),  # type: ignore[arg-type]
    ("backfill(start=naive)", lambda c: c.backfill("nightly", datetime(2026, 11, 1), START), "start"),
    ("backfill(start=None)", lambda c: c.backfill("nightly", None, START), "start"),  # type: ignore[arg-type]
    ("backfill(end=str)", lambda c: c.backfill("nightly", START, "x"), "end"),  # type: ignore[arg-type]
    ("backfill(overlap='x')", lambda c: c.backfill("nightly", START, START, overlap="x"), "overlap"),  # type: ignore[arg-type]
    ("backfill(job=None)", lambda c: c.backfill(None, START, START), "job"),  # type: ignore[arg-type]
    ("prune(nan)", lambda c: c.prune(NAN), "older_than"),
    ("prune(inf)", lambda c: c.prune(INF), "older_than"),
    ("prune(-1)", lambda c: c.prune(-1), "older_than"),
    ("prune('30d')", lambda c: c.prune("30d"), "older_than"),  # type: ignore[arg-type]
    ("prune(None)", lambda c: c.prune(None), "older_than"),  # type: ignore[arg-type]
    ("prune(True)", lambda c: c.prune(True), "older_than"),
    ("add_schedule(name=10 KB)", lambda c: c.add_schedule(LONG, "t", every=60), "name"),
    ("add_schedule(name=None)", lambda c: c.add_schedule(None, "t", every=60), "name"),  # type: ignore[arg-type]
    ("add_schedule(task='')", lambda c: c.add_schedule("s", "", every=60), "task"),
    ("add_schedule(task=300 chars)", lambda c: c.add_schedule("s", "t" * 300, every=60), "task"),
    ("add_schedule(by=NUL)", lambda c: c.add_schedule("s", "t", every=60, by="\x00"), "by"),
    ("add_schedule(by=1000 chars)", lambda c: c.add_schedule("s", "t", every=60, by="b" * 1000), "by"),
    (
        "add_schedule(args=70 KB)",
        lambda c: c.add_schedule("s", "t", every=60, args=["x" * 70_000], force=True),
        "args, kwargs, options and description",
    ),
    ("update_schedule(version='1')", lambda c: c.update_schedule("s", version="1", every=5), "version"),  # type: ignore[arg-type]
    ("update_schedule(version=0)", lambda c: c.update_schedule("s", version=0, every=5), "version"),
    ("update_schedule(version=None)", lambda c: c.update_schedule("s", version=None), "version"),  # type: ignore[arg-type]
    ("update_schedule(version=True)", lambda c: c.update_schedule("s", version=True), "version"),
    ("update_schedule(version=1.0)", lambda c: c.update_schedule("s", version=1.0), "version"),  # type: ignore[arg-type]
    ("update_schedule(by=NUL)", lambda c: c.update_schedule("s", version=1, by="\x00"), "by"),
    ("update_schedule(name=5)", lambda c: c.update_schedule(5, version=1), "name"),  # type: ignore[arg-type]
    ("remove_schedule(version='1')", lambda c: c.remove_schedule("s", version="1"), "version"),  # type: ignore[arg-type]
    ("remove_schedule(version=-1)", lambda c: c.remove_schedule("s", version=-1), "version"),
    ("remove_schedule(by=NUL)", lambda c: c.remove_schedule("s", by="a\x00"), "by"),
    ("remove_schedule(name='')", lambda c: c.remove_schedule(""), "name"),
    ("schedule(5)", lambda c: c.schedule(5), "name"),  # type: ignore[arg-type]
    ("schedule('')", lambda c: c.schedule(""), "name"),
    ("schedule_history(None)", lambda c: c.schedule_history(None), "name"),  # type: ignore[arg-type]
    ("schedule_history(NUL)", lambda c: c.schedule_history("a\x00"), "name"),
]  # fmt: skip
CONTROL: list[tuple[str, Callable[[], object]]] = [
    ("Control(12345)", lambda: Control(12345)),  # type: ignore[arg-type]
    ("Control(None)", lambda: Control(None)),  # type: ignore[arg-type]
    ("Control(bytes)", lambda: Control(b"sqlite:///x.db")),  # type: ignore[arg-type]
    ("Control(object())", lambda: Control(object())),  # type: ignore[arg-type]
]


class Recorded:
    """The backend, recording each of its methods Control calls."""

    def __init__(self, backend: LeaseBackend) -> None:
        self._backend = backend
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._backend, name)
        if not callable(found):
            return found

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return found(*args, **kwargs)

        return recorded


@pytest.fixture
def backend(lease_url: str) -> Iterator[LeaseBackend]:
    opened = open_backend(lease_url)
    opened.register_jobs({"nightly": '{"cron": "0 3 * * *"}'})
    yield opened
    opened.close()


def test_the_limits_are_what_the_docs_say() -> None:
    assert (NAME_MAX, BY_MAX, REASON_MAX, DEFINITION_MAX) == (200, 200, 1000, 65536)


@pytest.mark.parametrize(("what", "call", "parameter"), WRONG, ids=[w[0] for w in WRONG])
def test_a_wrong_argument_is_refused_naming_it_before_the_store(
    backend: LeaseBackend, what: str, call: Call, parameter: str
) -> None:
    recorded = Recorded(backend)
    control = Control(recorded)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument) as refused:
        call(control)
    assert refused.value.parameter == parameter, str(refused.value)
    assert str(refused.value).startswith(f"{parameter}="), str(refused.value)
    assert recorded.calls == [], f"{what} touched the store: {recorded.calls}"


@pytest.mark.parametrize(("what", "make"), CONTROL, ids=[c[0] for c in CONTROL])
def test_control_refuses_what_is_not_a_backend(what: str, make: Callable[[], object]) -> None:
    with pytest.raises(InvalidArgument) as refused:
        make()
    assert refused.value.parameter == "backend"


def test_the_largest_values_allowed_are_stored_alike(backend: LeaseBackend) -> None:
    """At each limit, every store takes the value and gives it back unchanged."""
    control = Control(backend)
    name = "n" * NAME_MAX
    added = control.add_schedule(name, "t" * NAME_MAX, every=60, by="b" * BY_MAX, force=True)
    assert (added.name, added.task, added.updated_by) == (name, "t" * NAME_MAX, "b" * BY_MAX)
    assert control.schedule(name).updated_by == "b" * BY_MAX
    assert control.pause("nightly", "r" * REASON_MAX, by="é" * BY_MAX)
    job = control.job("nightly")
    assert (job.paused_reason, job.paused_by) == ("r" * REASON_MAX, "é" * BY_MAX)
    assert len(control.runs(limit=100_000)) == 0

"""Stored schedules under ``relay-dramatiq``, in one process: a stub broker, a SQLite store and the
scheduler share a fake clock, so each slot and each message are exact.

Only actors allowed with ``schedulable`` run; each run is the actor's message with the stored
arguments and the stored options in Dramatiq's terms; what cannot apply is reported, never sent.
Real workers and schedulers: ``tests/dramatiq/test_stored_processes.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from dramatiq.common import dq_name
from dramatiq.message import Message

from relay import Control
from relay.backends.sqlite import SQLiteLeaseBackend
from relay.errors import ConfigurationError, UnsupportedOption
from relay.events import ScheduleNotRunnable
from relay.runs import HEADER
from relay.stored import Schedule
from relay.testing import FakeClock
from relay_dramatiq import (
    RelayMiddleware,
    Scheduler,
    periodic,
    periodic_actors,
    schedulable,
    schedulable_actors,
)
from relay_dramatiq._stored import stored_message
from tests.dramatiq.test_cli import cli
from tests.support.backends import unique

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc).timestamp()


class App:
    """A stub broker with Relay's middleware on a fake-clock SQLite store, and actor ``echo``."""

    def __init__(self, tmp_path: Path) -> None:
        self.clock = FakeClock(T0)
        self.store = SQLiteLeaseBackend(tmp_path / "relay.db", clock=self.clock)
        self.middleware = RelayMiddleware(self.store, tick=1)
        self.broker = StubBroker()
        self.broker.add_middleware(self.middleware)
        self.name = unique("echo")
        self.echo = schedulable(self.actor(self.name, lambda n, word="hi": None))
        self.control = Control(self.store)
        self.refused: list[ScheduleNotRunnable] = []
        self.middleware.on(ScheduleNotRunnable, self.refused.append)

    def actor(self, name: str, fn: Any, **options: Any) -> dramatiq.Actor[Any, Any]:
        return dramatiq.actor(broker=self.broker, actor_name=name, queue_name="q", **options)(fn)

    def messages(self, queue: str = "q") -> list[Message[Any]]:
        found = self.broker.queues[queue]
        return [Message.decode(found.get_nowait()) for _ in range(found.qsize())]


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    made = App(tmp_path)
    yield made
    made.store.close()


def test_schedulable_refuses_what_would_let_a_run_escape_relay(app: App, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"above @dramatiq\.actor"):
        schedulable(lambda: None)  # type: ignore[type-var]
    bare = dramatiq.actor(broker=StubBroker(), actor_name=unique("bare"))(lambda: None)
    with pytest.raises(ConfigurationError, match="is schedulable, but its broker has no Relay"):
        schedulable(bare)
    claims = StubBroker()
    claims.add_middleware(RelayMiddleware(f"sqlite:///{tmp_path / 'c.db'}?strategy=claim"))
    on_claims = dramatiq.actor(broker=claims, actor_name=unique("c"))(lambda: None)
    with pytest.raises(UnsupportedOption, match="'schedulable' needs a lease backend"):
        schedulable(on_claims)
    retrying = app.actor(unique("retrying"), lambda: None, max_retries=3)
    with pytest.raises(ConfigurationError, match=r"schedulable actor .* sets max_retries"):
        schedulable(retrying)
    with pytest.raises(ConfigurationError, match="already schedulable"):
        schedulable(app.echo)


def test_a_stored_schedule_sends_its_actor_the_stored_arguments_and_options(app: App) -> None:
    scheduler = Scheduler([], schedulable=[app.echo], clock=app.clock)
    scheduler.start()
    scheduler.step()  # records the heartbeat, with the allowed actor
    assert app.name in {t for tasks in app.control.allowed_tasks().values() for t in tasks}
    options = {"queue_name": "q", "time_limit": 5000}
    kwargs = {"word": "yo"}
    app.control.add_schedule("s", app.name, every=1, args=[7], kwargs=kwargs, options=options)
    app.control.add_schedule("later", app.name, every=1, args=[8], options={"delay": 500})
    scheduler.step()  # applied: a change never fires at once
    assert app.messages() == []
    app.clock.advance(1.2)
    scheduler.step()
    [message] = app.messages()
    assert (message.actor_name, message.args, message.kwargs) == (app.name, (7,), {"word": "yo"})
    assert message.options["time_limit"] == 5000 and message.options["max_retries"] == 0
    assert HEADER in message.options
    [delayed] = app.messages(dq_name("q"))
    assert delayed.args == (8,) and delayed.options["eta"] > 0
    assert app.refused == []


def test_an_actor_not_allowed_is_reported_not_runnable_and_never_sent(app: App) -> None:
    other = app.actor(unique("other"), lambda n: None)
    scheduler = Scheduler([], schedulable=[app.echo], clock=app.clock)
    scheduler.start()
    scheduler.step()  # records the heartbeat: add_schedule accepts the allowed actor
    app.control.add_schedule("sneaky", other.actor_name, every=1, args=[1], force=True)
    app.control.add_schedule("bad", app.name, every=1, args=[1], options={"priority": 1})
    app.control.add_schedule("misfit", app.name, every=1, args=[1, 2, 3])
    for _ in range(3):
        scheduler.step()
        app.clock.advance(1)
    assert app.messages() == []
    reasons = {e.schedule: e.reason for e in app.refused}
    assert sorted(reasons) == ["bad", "misfit", "sneaky"]  # once each
    assert f"does not allow task {other.actor_name!r}" in reasons["sneaky"]
    assert f"allow it with relay_dramatiq.schedulable({other.actor_name!r})" in reasons["sneaky"]
    assert "'priority' is an actor's in Dramatiq" in reasons["bad"]
    assert "its arguments do not fit actor" in reasons["misfit"]


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"max_retries": 3}, "set the schedule's max_attempts"),
        ({"retry_when": "x"}, "Relay retries a failed run itself"),
        ({"on_success": "other_actor"}, "'on_success' is not one relay-dramatiq applies"),
        ({HEADER: {}}, f"{HEADER!r} is not one relay-dramatiq applies"),
        ({"queue_name": "nowhere"}, "no worker would take the message: use one of 'q'$"),
        ({"queue_name": "q.DQ"}, "'q.DQ', not a queue of this app's actors"),
        ({"delay": 1.5}, "give whole milliseconds"),
        ({"delay": 300_000}, "not shorter than the middleware's queue_lease (300 s)"),
        ({"time_limit": 0}, "'time_limit' is 0: give whole milliseconds, at least 1"),
        ({"broker_priority": 1}, "needs a RabbitmqBroker created with max_priority"),
    ],
)
def test_options_that_cannot_apply_are_refused_naming_the_fix(
    app: App, options: dict[str, Any], words: str
) -> None:
    schedule = Schedule(name="s", task=app.name, every=1, args=(1,), options=options)
    with pytest.raises(ConfigurationError) as caught:
        stored_message(app.echo, schedule, app.middleware.queue_lease)
    assert words in f"{caught.value}$"  # "$": the message ends there


def test_a_periodic_actor_with_a_stored_schedules_name_refuses_to_start(app: App) -> None:
    name = unique("nightly")
    periodic(every=3600)(app.actor(name, lambda: None))
    app.control.add_schedule(name, app.name, every=3600, args=[1], force=True)

    scheduler = Scheduler(
        [p for p in periodic_actors() if p.job.name == name], schedulable=[app.echo]
    )
    with pytest.raises(ConfigurationError) as caught:
        scheduler.start()
    assert f"code job(s) {name!r}" in str(caught.value)
    assert "stored schedule(s) of the same name" in str(caught.value)


PLAIN_APP = """
import dramatiq
from dramatiq.brokers.stub import StubBroker
import relay_dramatiq

broker = StubBroker()
broker.add_middleware(relay_dramatiq.RelayMiddleware("sqlite:///{db}"))
dramatiq.set_broker(broker)

@dramatiq.actor
def plain(n: int) -> None: ...
"""


def test_relay_dramatiq_names_an_unknown_schedulable_actor(tmp_path: Path) -> None:
    (tmp_path / "plain_app.py").write_text(PLAIN_APP.format(db=tmp_path / "relay.db"))
    proc = cli(tmp_path, "plain_app", "--schedulable", "nope")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0, out
    assert "--schedulable nope: the app's broker has no actor of that name" in out


def test_a_middleware_names_actors_stored_schedules_may_run(tmp_path: Path) -> None:
    store = SQLiteLeaseBackend(tmp_path / "named.db")
    named, missing = unique("named"), unique("missing")
    with pytest.raises(ConfigurationError, match=r"must be a list of actor names"):
        RelayMiddleware(store, schedulable=named)
    with pytest.raises(UnsupportedOption, match="schedulable"):
        RelayMiddleware(f"sqlite:///{tmp_path}/claim.db?strategy=claim", schedulable=[named])
    broker = StubBroker()
    broker.add_middleware(RelayMiddleware(store, schedulable=[named]))
    actor = dramatiq.actor(broker=broker, actor_name=named, queue_name="q")(lambda n: None)
    assert actor in schedulable_actors(broker) and actor not in schedulable_actors()

    other = StubBroker()
    other.add_middleware(RelayMiddleware(store, schedulable=[missing]))
    with pytest.raises(ConfigurationError) as caught:
        schedulable_actors(other)
    assert f"RelayMiddleware(schedulable=...) names actor {missing!r}" in str(caught.value)
    store.close()

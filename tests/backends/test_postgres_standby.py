"""PostgreSQL with standbys: multi-host URLs, ``require_sync``, and one backend through a promotion.

The URL tests use the shared server; the others a primary and a standby of their own
(:mod:`tests.support.pg_standby`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import TypeVar
from urllib.parse import urlsplit

import psycopg
import pytest

from relay import (
    AcquireRequest,
    BackendUnavailable,
    ConfigurationError,
    Outcome,
    open_backend,
)
from relay.backends.postgres import PostgresLeaseBackend
from relay.errors import NotAcknowledged, StoreNotFound
from tests.backends.pg_server import find_bin
from tests.support.backends import unique
from tests.support.pg_standby import PgPair, pg_pair
from tests.support.ports import free_port
from tests.support.services import SERVICES

pytestmark = pytest.mark.postgres
UTC = timezone.utc
T = TypeVar("T")


@pytest.fixture
def schema() -> Iterator[str]:
    name = unique()
    yield name
    with psycopg.connect(SERVICES["postgres"].url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _multi_host(extra: str = "", password: str = "") -> str:
    """The shared server's URL with a host that refuses connections listed first."""
    url = urlsplit(SERVICES["postgres"].url)
    auth = f"{url.username}:{password}@" if password else f"{url.username}@"
    hosts = f"127.0.0.1:{free_port()},{url.hostname}:{url.port or 5432}"
    return f"postgresql://{auth}{hosts}{url.path}{extra}"


# -- URL forms and bad input (the shared server) ------------------------------------------------


def test_a_multi_host_url_reaches_the_host_that_answers(schema: str) -> None:
    backend = open_backend(_multi_host(f"?schema={schema}&target_session_attrs=read-write"))
    try:
        assert isinstance(backend, PostgresLeaseBackend)
        backend.now()
        with backend._pool.connection() as conn:
            assert conn.info.port == (urlsplit(SERVICES["postgres"].url).port or 5432)
    finally:
        backend.close()


def test_several_hosts_connect_to_the_writable_one_unless_only_reading(schema: str) -> None:
    backend = PostgresLeaseBackend.from_url(_multi_host(f"?schema={schema}"))
    with backend._pool.connection() as conn:
        assert "target_session_attrs=read-write" in conn.info.dsn  # the default, several hosts
    backend.close()
    for attrs in ("any", "standby", "prefer-standby"):
        url = _multi_host(f"?schema={schema}&target_session_attrs={attrs}")
        with pytest.raises(ConfigurationError) as caught:
            open_backend(url)
        assert "target_session_attrs=read-write" in str(caught.value)
    shared = urlsplit(SERVICES["postgres"].url)
    ports = f"{free_port()},{shared.port or 5432}"
    libpq_form = f"postgresql://{shared.username}@{shared.path}?host=127.0.0.1,{shared.hostname}&port={ports}"
    with pytest.raises(ConfigurationError):
        open_backend(f"{libpq_form}&schema={schema}&target_session_attrs=any")
    open_backend(f"{libpq_form}&schema={schema}").close()
    # relay runs reads: a standby will do
    url = _multi_host(f"?schema={schema}&target_session_attrs=any")
    open_backend(url, read_only=True).close()


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("postgresql://postgres@a:5432,b:54x2/test", ["malformed port", "host:port"]),
        ("postgresql://postgres@a:5432,/test", ["empty host"]),
        ("postgresql://postgres@a/test?require_sync=maybe", ["require_sync", "1 or 0"]),
    ],
)
def test_bad_multi_host_input_names_the_fix(url: str, words: list[str]) -> None:
    with pytest.raises(ConfigurationError) as caught:
        open_backend(url)
    for word in words:
        assert word in str(caught.value)


def test_hosts_that_all_fail_are_each_named() -> None:
    first, second = free_port(), free_port()
    with pytest.raises(BackendUnavailable) as caught:
        open_backend(f"postgresql://postgres:sekrit@127.0.0.1:{first},127.0.0.1:{second}/db")
    message = str(caught.value)
    assert f"127.0.0.1:{first} Connection refused; 127.0.0.1:{second} Connection refused" in message
    assert "sekrit" not in message and "check that the server is running" in message


def test_the_password_never_shows_with_several_hosts(schema: str) -> None:
    backend = open_backend(_multi_host(f"?schema={schema}", password="sekrit"))
    backend.close()
    assert "sekrit" not in backend.name and "***" in backend.name
    with pytest.raises(ConfigurationError) as caught:
        open_backend(_multi_host(f"?schema={schema}&require_sync=1", password="sekrit"))
    assert "sekrit" not in str(caught.value)


def test_require_sync_refuses_a_server_without_synchronous_standbys(
    schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    base = SERVICES["postgres"].url
    with pytest.raises(ConfigurationError) as caught:
        open_backend(f"{base}?schema={schema}&require_sync=1")
    message = str(caught.value)
    assert "synchronous_standby_names" in message and "require_sync" in message
    caplog.set_level(logging.WARNING, "relay.backends.postgres")
    open_backend(f"{base}?schema={schema}&require_sync=0").close()
    assert not caplog.records  # no standby, nothing asked: nothing to say


# -- a primary and a standby of our own ----------------------------------------------------------


def _need_binaries() -> None:
    if find_bin() is None:
        reason = "PostgreSQL's initdb, pg_ctl and pg_basebackup are not installed"
        if os.environ.get("RELAY_REQUIRE_SERVICES") == "1":
            pytest.fail(f"RELAY_REQUIRE_SERVICES=1 but {reason}", pytrace=False)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def pair() -> Iterator[PgPair]:
    _need_binaries()
    with pg_pair(synchronous=True) as started:
        yield started


def _set_standby_names(pair: PgPair, names: str) -> None:
    pair.primary.query(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
    pair.primary.query("SELECT pg_reload_conf()")
    deadline = time.monotonic() + 30
    while pair.primary.query("SHOW synchronous_standby_names") != [(names,)]:
        assert time.monotonic() < deadline, "the server never reloaded its configuration"
        time.sleep(0.05)


@pytest.mark.slow
def test_require_sync_opens_on_a_synchronous_primary_without_a_warning(
    pair: PgPair, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "relay.backends.postgres")
    backend = open_backend(f"{pair.url}?schema={unique()}&require_sync=1")
    assert isinstance(backend, PostgresLeaseBackend)
    facts = backend.replication()
    backend.close()
    assert not caplog.records
    assert facts.commits_wait and facts.sync_standbys == 1 and not facts.in_recovery
    assert facts.standbys == (("b", "sync"),) or facts.standbys == (("a", "sync"),)


@pytest.mark.slow
def test_a_session_whose_commits_do_not_wait_is_refused(pair: PgPair) -> None:
    # synchronous_commit is a session setting: a role or URL can turn the wait off
    url = f"{pair.url}?schema={unique()}&require_sync=1&options=-csynchronous_commit%3Dlocal"
    with pytest.raises(ConfigurationError) as caught:
        open_backend(url)
    assert "synchronous_commit = 'local'" in str(caught.value)


@pytest.mark.slow
def test_an_asynchronous_standby_gets_one_warning_or_a_refusal(
    pair: PgPair, caplog: pytest.LogCaptureFixture
) -> None:
    _set_standby_names(pair, "")
    try:
        caplog.set_level(logging.WARNING, "relay.backends.postgres")
        open_backend(f"{pair.url}?schema={unique()}").close()
        assert len(caplog.records) == 1, caplog.records
        warning = caplog.records[0].getMessage()
        for word in ("asynchronously", "require_sync=1", "synchronous_standby_names", "async"):
            assert word in warning, warning
        with pytest.raises(ConfigurationError) as caught:
            open_backend(f"{pair.url}?schema={unique()}&require_sync=1")
        assert "synchronous_standby_names = ''" in str(caught.value)
    finally:
        _set_standby_names(pair, "*")


@pytest.mark.slow
def test_a_standby_serves_reads_and_refuses_writes_as_unavailable(pair: PgPair) -> None:
    schema = unique()
    slot = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    writer = open_backend(f"{pair.url}?schema={schema}")
    assert writer.capability == "lease"
    won = writer.acquire(AcquireRequest("job", slot, "writer", 60))
    writer.close()
    assert won.run is not None
    pair.wait_replayed()  # the schema too: a read-only open of a missing one is StoreNotFound
    standby = f"postgresql://postgres@127.0.0.1:{pair.standby.port}/postgres?schema={schema}"
    reader = open_backend(standby, read_only=True)  # what relay runs does
    assert reader.capability == "lease"
    try:
        assert [record.id for record in _eventually(lambda: reader.runs("job"))] == [won.run.id]
        for _ in range(2):  # each time over a new connection: the refused one was closed
            with pytest.raises(BackendUnavailable) as caught:
                reader.acquire(AcquireRequest("job", slot + timedelta(seconds=1), "reader", 60))
            assert "target_session_attrs=read-write" in str(caught.value)
        assert isinstance(reader, PostgresLeaseBackend)
        assert reader._pool.get_stats().get("returns_bad", 0) == 2
    finally:
        reader.close()
    standbys_only = f"postgresql://postgres@127.0.0.1:{free_port()},127.0.0.1:{pair.standby.port}"
    with pytest.raises(BackendUnavailable) as caught:
        open_backend(f"{standbys_only}/postgres?schema={schema}")
    assert "no server in the URL takes writes now" in str(caught.value)


@pytest.mark.slow
def test_a_standby_without_the_schema_says_it_may_not_have_replayed_it(pair: PgPair) -> None:
    standby = f"postgresql://postgres@127.0.0.1:{pair.standby.port}/postgres?schema={unique()}"
    with pytest.raises(StoreNotFound) as caught:
        open_backend(standby, read_only=True)
    assert "yet: this server is a standby" in str(caught.value)
    with pytest.raises(StoreNotFound) as caught:  # the primary: no such hint
        open_backend(f"{pair.url}?schema={unique()}", read_only=True)
    assert "standby" not in str(caught.value)


def _eventually(step: Callable[[], T], timeout: float = 30) -> T:
    """``step()``'s first non-empty answer, retried while the store is away or behind."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = step()
            if answer or time.monotonic() > deadline:
                return answer
        except BackendUnavailable:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


@pytest.mark.slow
def test_one_backend_follows_a_promotion_without_reopening() -> None:
    _need_binaries()
    slot = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    with pg_pair(synchronous=True) as pair:
        backend = open_backend(f"{pair.url}?schema=relay&require_sync=1&pool_timeout=2")
        assert backend.capability == "lease"
        try:
            held = backend.acquire(AcquireRequest("job", slot, "a", 60)).run
            assert held is not None
            pair.failover()
            pair.rebuild()  # until then, a commit on the new primary waits for a standby
            rival = _eventually(lambda: backend.acquire(AcquireRequest("job", slot, "b", 60)))
            assert rival.outcome is Outcome.HELD  # the lease was on the standby: it survived
            backend.heartbeat(held.id, held.token, 60)
            backend.finish(held.id, held.token, succeeded=True)
            later = backend.acquire(AcquireRequest("job", slot + timedelta(seconds=1), "b", 60))
            assert later.run is not None and later.run.token > held.token
        finally:
            backend.close()


@pytest.mark.slow
def test_after_a_long_outage_the_pool_reconnects_as_soon_as_the_new_primary_is_up() -> None:
    # psycopg_pool alone retries a connection after 1, 2, 4, 8, 16 s: promoted 20 s after the
    # kill, a step waited about 10 s more for its next try (measured), here it need not wait.
    _need_binaries()
    with pg_pair(synchronous=False) as pair:
        backend = open_backend(f"{pair.url}?schema=relay&pool_timeout=0.5")
        try:
            backend.now()
            pair.kill_primary()
            down_until = time.monotonic() + 20
            while time.monotonic() < down_until:  # a scheduler keeps asking, as its loop does
                with pytest.raises(BackendUnavailable):
                    backend.now()
                time.sleep(0.2)
            pair.promote()
            promoted = time.monotonic()
            _eventually(backend.now)
            assert time.monotonic() - promoted < 3.0  # was about 10 s
        finally:
            backend.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_commit_whose_wait_for_the_standby_was_cancelled_is_not_acknowledged() -> None:
    # A cancelled wait (pg_cancel_backend here; a client's cancel does the same) leaves the commit
    # on the primary alone, and the server answers success with a WARNING. (statement_timeout is
    # off by then: it does not end the wait.)
    _need_binaries()
    slot = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    with pg_pair(synchronous=True) as pair:
        backend = open_backend(f"{pair.url}?schema=relay&require_sync=1")
        canceller = threading.Thread(target=_cancel_a_wait_for_the_standby, args=(pair,))
        try:
            pair.pause_wal_sender()  # the standby stops confirming: every commit waits
            canceller.start()
            with pytest.raises(NotAcknowledged) as caught:
                backend.acquire(AcquireRequest("job", slot, "a", 60))
            assert "no synchronous standby confirmed" in str(caught.value)
            assert backend.now()  # a read needs no standby, and the notice is not carried over
        finally:
            canceller.join(timeout=60)
            backend.close()


def _cancel_a_wait_for_the_standby(pair: PgPair) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        query = "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
        if pair.primary.query(query):
            return
        time.sleep(0.1)

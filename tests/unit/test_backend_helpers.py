"""The helpers the backends share: milliseconds, LeaseLost's words, Redis keys and URLs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from relay.backends._amqp import pika_parameters
from relay.backends._lost import is_held, lease_lost, started_elsewhere
from relay.backends._ms import instance_from_fields, ms, optional_from_ms, positive_ms
from relay.backends._redis import (
    check_prefix,
    driver_url,
    job_base,
    job_name,
    split_run_key,
    time_ms,
)
from relay.backends._url import BackendURL
from relay.errors import ConfigurationError, LeaseLost

RUN = "job@2026-11-29T21:30:00Z"


@pytest.mark.parametrize(
    ("seconds", "expected"), [(0.0, 0), (1.5, 1500), (0.0004, 0), (0.0006, 1), (30.0, 30_000)]
)
def test_ms_rounds_to_the_nearest_millisecond(seconds: float, expected: int) -> None:
    assert ms(seconds) == expected


@pytest.mark.parametrize(
    ("seconds", "expected"), [(0.0, 1), (0.0009, 1), (0.0019, 1), (600.0, 600_000), (2.5, 2500)]
)
def test_positive_ms_cuts_down_but_never_below_one(seconds: float, expected: int) -> None:
    assert positive_ms(seconds) == expected


def test_optional_from_ms_keeps_none_and_converts_the_rest() -> None:
    assert optional_from_ms(None) is None
    assert optional_from_ms(0) == datetime(1970, 1, 1, tzinfo=UTC)
    assert optional_from_ms(1_500) == datetime(1970, 1, 1, 0, 0, 1, 500_000, tzinfo=UTC)


def test_instance_from_fields_reads_strings_and_numbers_alike() -> None:
    fields = {
        "role": "beat", "host": "h1", "pid": "42", "started_ms": "1000", "version": "1.0",
        "interval": "2.5", "beat_ms": 3000, "expires_ms": 4000,
    }  # fmt: skip
    info = instance_from_fields("me", fields)
    assert (info.owner, info.role, info.host, info.pid, info.version) == (
        "me", "beat", "h1", 42, "1.0",
    )  # fmt: skip
    assert info.interval == 2.5
    assert info.started_at == datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert info.beat_at == datetime(1970, 1, 1, 0, 0, 3, tzinfo=UTC)
    assert info.expires_at == datetime(1970, 1, 1, 0, 0, 4, tzinfo=UTC)


@pytest.mark.parametrize(
    ("found", "token", "held"),
    [
        (("running", 7), 7, True),
        (("running", 8), 7, False),
        (("succeeded", 7), 7, False),
        (("pending", 7), 7, False),
        (None, 7, False),
    ],
)
def test_is_held_needs_a_running_run_with_the_token(
    found: tuple[str, int] | None, token: int, held: bool
) -> None:
    assert is_held(found, token) is held


@pytest.mark.parametrize(
    ("found", "message"),
    [
        (None, f"run {RUN} has no lease"),
        (("running", 9), f"run {RUN}: token 7 is stale, the current token is 9"),
        (("failed", 9), f"run {RUN}: token 7 is stale, the current token is 9"),
        (("succeeded", 7), f"run {RUN} is succeeded, no longer running"),
        (("pending", 7), f"run {RUN} is pending, no longer running"),
    ],
)
def test_lease_lost_says_why_in_the_order_stores_check(
    found: tuple[str, int] | None, message: str
) -> None:
    lost = lease_lost(RUN, 7, found)
    assert isinstance(lost, LeaseLost)
    assert str(lost) == message


def test_started_elsewhere_names_the_other_runner() -> None:
    lost = started_elsewhere(RUN, 7, "host-2:99")
    assert str(lost) == f"run {RUN} (token 7) was already started by host-2:99"


@pytest.mark.parametrize(
    ("prefix", "job", "base"),
    [
        ("relay:", "nightly", "relay:{nightly}:"),
        ("", "a", "{a}:"),
        ("p:", "x{y}z", "p:{x%7By%7Dz}:"),
        ("p:", "50%", "p:{50%25}:"),
        ("p:", "%7B", "p:{%257B}:"),  # an escaped brace in a name stays apart from a real one
    ],
)
def test_job_base_keeps_each_job_in_its_own_hash_tag(prefix: str, job: str, base: str) -> None:
    assert job_base(prefix, job) == base


@pytest.mark.parametrize("job", ["nightly", "x{y}z", "50%", "%7B", "}:run:{", "a:b", ""])
@pytest.mark.parametrize("prefix", ["relay:", "", "p:run:"])
def test_a_run_key_gives_back_its_job_and_member(prefix: str, job: str) -> None:
    base = job_base(prefix, job)
    member = "manual:2026-11-30T10:00:00.123Z"
    assert split_run_key(prefix, f"{base}run:{member}") == (base, member)
    assert job_name(prefix, base) == job


@pytest.mark.parametrize("prefix", ["relay{", "}relay", "{a}:"])
def test_a_prefix_with_braces_is_refused(prefix: str) -> None:
    with pytest.raises(ConfigurationError, match="braces"):
        check_prefix(prefix)
    check_prefix("relay:app:")  # no braces: accepted


CHECKED = "ssl_check_hostname=true"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://h:6379/0?prefix=p:&retention=5", "redis://h:6379/0"),
        ("valkey://h:6379/2?prefix=p:", "redis://h:6379/2"),
        # TLS checks the host name on every redis-py (before 6.0 it did not by default)
        ("valkeys://h:6379?socket_timeout=3", "rediss://h:6379?socket_timeout=3&" + CHECKED),
        ("rediss://u:pw@h:6379/1", "rediss://u:pw@h:6379/1?" + CHECKED),
        ("rediss://h/1?ssl_check_hostname=false", "rediss://h/1?ssl_check_hostname=false"),
        ("rediss://h/1?ssl_cert_reqs=none", "rediss://h/1?ssl_cert_reqs=none"),
    ],
)
def test_driver_url_drops_our_options_and_spells_valkey_redis(url: str, expected: str) -> None:
    assert driver_url(BackendURL(url), ("prefix", "retention")) == expected


def test_driver_url_refuses_a_database_that_is_not_a_number() -> None:
    with pytest.raises(ConfigurationError, match=r"a database is a number"):
        driver_url(BackendURL("redis://h:6379/cache"), ())


def test_pika_parameters_drop_our_options_and_refuse_a_bad_url() -> None:
    parameters = pika_parameters(
        BackendURL("amqp://u:pw@h:5673/vh?prefix=x&heartbeat=7"), ("prefix",)
    )
    assert (parameters.host, parameters.port, parameters.virtual_host) == ("h", 5673, "vh")
    assert parameters.heartbeat == 7
    with pytest.raises(ConfigurationError, match="malformed"):
        pika_parameters(BackendURL("amqp://h:5672/?heartbeat=soon"), ())


def test_time_ms_cuts_the_server_clock_to_whole_milliseconds() -> None:
    assert time_ms((1_700_000_000, 999_999)) == 1_700_000_000_999
    assert time_ms(("12", "1500")) == 12_001  # redis-py may hand back strings


@pytest.mark.parametrize(
    ("url", "hosts"),
    [
        ("postgresql://u@a:5441,b:5442/db?x=1", [("a", 5441), ("b", 5442)]),
        ("nats://h:4301,h:4302,h:4303", [("h", 4301), ("h", 4302), ("h", 4303)]),
        ("redis://u:p@[::1]:6379/0", [("::1", 6379)]),
        ("redis://[::1],b/0", [("::1", None), ("b", None)]),
        ("redis://h/0", [("h", None)]),
        ("sqlite:///relay.db", []),
    ],
)
def test_a_url_names_each_of_its_hosts(url: str, hosts: list[tuple[str, int | None]]) -> None:
    parsed = BackendURL(url)
    assert parsed.hosts == hosts
    assert parsed.multi_host is (len(hosts) > 1)


@pytest.mark.parametrize("url", ["redis://h:99999/0", "nats://a:1,b:x", "postgresql://a:1,:2/db"])
def test_a_malformed_host_list_is_refused(url: str) -> None:
    with pytest.raises(ConfigurationError, match="host"):
        BackendURL(url)


@pytest.mark.parametrize(
    "url", ["redis://a:6379,b:6379/0", "amqp://a,b/", "redis://a,b?strategy=idmp"]
)
def test_a_multi_host_url_on_a_backend_that_takes_one_host_is_refused(url: str) -> None:
    from relay.backends import capability_of

    with pytest.raises(ConfigurationError, match="takes one"):
        capability_of(url)


def test_a_multi_host_url_is_accepted_where_the_driver_fails_over() -> None:
    from relay.backends import capability_of

    assert capability_of("postgresql://a:5441,b:5442/db?target_session_attrs=read-write") == "lease"
    assert capability_of("nats://a:4222,b:4222") == "lease"


@pytest.mark.parametrize(
    "prefix", ["a*b", "relay?", "x[y]", "back\\slash", "sp ace", "é", "p" * 101]
)
def test_a_prefix_that_is_not_plain_text_is_refused(prefix: str) -> None:
    with pytest.raises(ConfigurationError, match="glob characters"):
        check_prefix(prefix)


@pytest.mark.parametrize("prefix", ["relay:", "", "myapp:relay:", "a/b.c-d_e:"])
def test_a_plain_prefix_is_accepted(prefix: str) -> None:
    check_prefix(prefix)


@pytest.mark.parametrize("prefix", ["relay.*", "a#b", "", "relay claim", "(x)", "p" * 101])
def test_a_rabbitmq_queue_prefix_that_is_not_plain_text_is_refused(prefix: str) -> None:
    from relay.backends.rabbitmq import GateQueues

    with pytest.raises(ConfigurationError, match="queue prefix"):
        GateQueues(prefix)
    GateQueues("myapp.relay:claim")


def test_a_yes_no_option_takes_words_and_refuses_anything_else() -> None:
    url = BackendURL("postgresql://h/db?migrate=false&a=YES&b=0")
    assert url.flag_option("migrate", True) is False
    assert url.flag_option("a", False) is True and url.flag_option("b", True) is False
    assert url.flag_option("absent", True) is True
    with pytest.raises(ConfigurationError, match="must be true or false"):
        BackendURL("postgresql://h/db?migrate=maybe").flag_option("migrate", True)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://u:s3cret@h:6379/0?prefix=a:", "redis://u:***@h:6379/0?prefix=a:"),
        ("nats://s3cret@h:4222?bucket=b", "nats://***@h:4222?bucket=b"),  # a NATS token
        ("tls://s3cret@h:4222", "tls://***@h:4222"),
        ("redis://u@h:6379/0", "redis://u@h:6379/0"),  # a user name alone is no secret
        ("postgresql://u@h/db?password=s3cret&sslmode=require",
         "postgresql://u@h/db?password=***&sslmode=require"),
        ("postgresql://u@h/db?a=1&sslpassword=s3cret", "postgresql://u@h/db?a=1&sslpassword=***"),
    ],
)  # fmt: skip
def test_redacted_hides_every_secret_a_url_can_carry(url: str, shown: str) -> None:
    assert BackendURL(url).redacted() == shown

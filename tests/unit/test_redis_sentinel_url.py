"""Redis Sentinel URLs: the schemes, the service and database, options, and bad input."""

from __future__ import annotations

import pytest

from relay.backends import capability_of, open_backend
from relay.backends._redis_sentinel import close_sentinels, sentinel_client
from relay.backends._url import BackendURL
from relay.errors import BackendUnavailable, ConfigurationError, RelayError

SCHEMES = ["redis+sentinel", "rediss+sentinel", "valkey+sentinel", "valkeys+sentinel"]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_sentinel_scheme_names_the_redis_backends(scheme: str) -> None:
    hosts = "a:26379,b:26380,c"
    assert capability_of(f"{scheme}://{hosts}/relay") == "lease"
    assert capability_of(f"{scheme}://{hosts}/relay/2?strategy=lease") == "lease"
    for strategy in ("script", "stream-id", "idmp"):
        assert capability_of(f"{scheme}://{hosts}/relay?strategy={strategy}") == "claim"


def test_several_hosts_are_refused_on_plain_redis_still() -> None:
    with pytest.raises(ConfigurationError, match=r"redis\+sentinel://"):
        capability_of("redis://a:6379,b:6379/0")


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("redis+sentinel://a:26379,b:26379", ["names no service", "/mymaster/0"]),
        ("redis+sentinel://a:26379/", ["names no service"]),
        ("redis+sentinel:///relay/0", ["names no sentinel", "host1:26379,host2:26379"]),
        ("redis+sentinel://a/relay/cache", ["database 'cache'", "/mymaster/0"]),
        ("redis+sentinel://a/relay?cluster=yes", ["does not know", "cluster", "sentinel_password"]),
        ("redis+sentinel://a/relay?strategy=script&cluster=yes", ["does not know", "cluster"]),
        ("redis+sentinel://a/relay?sentinel_pasword=x", ["sentinel_pasword", "sentinel_password"]),
        ("redis+sentinel://a/r?strategy=script&socket_timeout=no", ["malformed", "socket_timeout"]),
    ],
)
def test_bad_sentinel_urls_are_refused_naming_the_fix(url: str, words: list[str]) -> None:
    with pytest.raises(ConfigurationError) as caught:
        open_backend(url)
    assert isinstance(caught.value, RelayError)
    for word in words:
        assert word in str(caught.value)


def test_passwords_are_masked_in_messages() -> None:
    # Nothing listens on port 1: the sentinels cannot be reached, and the message says so.
    url = "redis+sentinel://u:data-secret@127.0.0.1:1/relay/0?sentinel_password=sentinel-secret"
    with pytest.raises(BackendUnavailable) as caught:
        open_backend(url + "&socket_connect_timeout=1")
    message = str(caught.value)
    assert "no sentinel names a primary" in message and "service" in message
    assert "data-secret" not in message and "sentinel-secret" not in message
    assert "u:***@" in message
    redacted = BackendURL(url).redacted()
    assert "secret" not in redacted and "sentinel_password=***" in redacted


def test_a_sentinel_that_failed_is_named_by_its_address_not_its_client_settings() -> None:
    # redis-py 8.2 lists each sentinel's failure after the repr of its client, every setting.
    url = "redis+sentinel://127.0.0.1:1,127.0.0.1:2/relay/0?socket_connect_timeout=1"
    with pytest.raises(BackendUnavailable) as caught:
        open_backend(url)
    message = str(caught.value)
    assert "no sentinel names a primary" in message
    assert "ConnectionPool" not in message and "socket_keepalive" not in message
    assert "127.0.0.1:1" in message and "127.0.0.1:2" in message


def test_the_url_parts_go_to_the_data_nodes_and_the_sentinels() -> None:
    url = (
        "rediss+sentinel://user:pw@a:1,b/my%20service/3?sentinel_password=sp&sentinel_username=su"
        "&socket_timeout=2.5&prefix=p:&ssl_cert_reqs=none"
    )
    client = sentinel_client(BackendURL(url), ["prefix"], decode_responses=True)
    pool = client.connection_pool
    manager = pool.sentinel_manager  # type: ignore[attr-defined]
    try:
        assert pool.service_name == "my service"  # type: ignore[attr-defined]
        data = pool.connection_kwargs
        assert (data["username"], data["password"], data["db"]) == ("user", "pw", 3)
        assert data["socket_timeout"] == 2.5 and data["decode_responses"] is True
        assert data["ssl_cert_reqs"] == "none" and "prefix" not in data
        assert "SSL" in pool.connection_class.__name__  # TLS to the data nodes
        sentinels = [s.connection_pool.connection_kwargs for s in manager.sentinels]
        assert [(s["host"], s["port"]) for s in sentinels] == [("a", 1), ("b", 26379)]
        assert {(s["username"], s["password"], s["socket_timeout"]) for s in sentinels} == {
            ("su", "sp", 2.5)
        }
    finally:
        client.close()
        close_sentinels(client)

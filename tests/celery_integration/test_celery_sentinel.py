"""A Celery app whose broker is kombu's Redis Sentinel transport decides runs on the same Redis."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from relay.backends import capability_of
from relay.backends.redis_lease import RedisLeaseBackend
from relay.errors import ConfigurationError
from relay_celery.config import load_settings, open_checked
from tests.celery_integration.cluster import cluster
from tests.celery_integration.test_celery_processes import assert_every_second_once
from tests.support.backends import unique
from tests.support.redis_sentinel import own_sentinel_topology


def app_with(broker: str, **conf: Any) -> Celery:
    app = Celery("relay_sentinel", broker=broker)
    app.conf.update(conf)
    return app


def test_a_sentinel_broker_becomes_the_same_store_through_the_same_sentinels() -> None:
    app = app_with(
        "sentinel://:pw@h1:26379;sentinel://:pw@h2:26380;sentinel://h3/3",
        broker_transport_options={"master_name": "my master", "sentinel_kwargs": {"password": "s"}},
    )
    backend = load_settings(app).backend
    assert backend == "redis+sentinel://:pw@h1:26379,h2:26380,h3/my%20master?sentinel_password=s"
    assert backend is not None and capability_of(backend) == "lease"


def test_the_database_and_tls_follow_the_broker() -> None:
    app = app_with(
        "sentinel://u:p@h1:26379/2",
        broker_transport_options={"master_name": "m"},
        broker_use_ssl={"ssl_cert_reqs": ssl.CERT_REQUIRED, "ssl_ca_certs": "/ca.pem"},
    )
    backend = load_settings(app).backend
    assert backend == (
        "rediss+sentinel://u:p@h1:26379/m/2?ssl_ca_certs=%2Fca.pem&ssl_cert_reqs=required"
    )


def test_a_sentinel_broker_without_master_name_is_refused_naming_it() -> None:
    with pytest.raises(ConfigurationError, match="master_name"):
        load_settings(app_with("sentinel://h1:26379;sentinel://h2:26379"))


def test_relay_backend_still_wins_over_the_broker() -> None:
    app = app_with("sentinel://h1:26379", relay_backend="redis://elsewhere:6379/0")
    assert load_settings(app).backend == "redis://elsewhere:6379/0"


@pytest.mark.slow
def test_the_derived_store_opens_on_the_current_primary(tmp_path: Path) -> None:
    with own_sentinel_topology(tmp_path) as topology:
        broker = ";".join(f"sentinel://127.0.0.1:{s.port}" for s in topology.sentinels) + "/0"
        app = app_with(broker, broker_transport_options={"master_name": "relay"})
        backend, settings = open_checked(load_settings(app))
        try:
            assert isinstance(backend, RedisLeaseBackend) and settings.capability == "lease"
            backend.now()
            address = backend._redis.connection_pool.master_address  # type: ignore[union-attr]
            assert address[1] == topology.primary().port
        finally:
            backend.close()
        with app.connection_for_write() as connection:  # kombu reaches the same primary
            connection.ensure_connection(max_retries=3)
            client = connection.default_channel.client
            assert client.connection_pool.get_master_address()[1] == topology.primary().port


@pytest.mark.slow
def test_beats_and_a_worker_on_a_sentinel_broker_run_each_slot_once_through_a_failover(
    tmp_path: Path,
) -> None:
    """Two ``celery beat`` and a ``celery worker``, broker and store through the same sentinels:
    they follow the failover without a restart, and each slot runs once."""
    with own_sentinel_topology(tmp_path / "topology") as topology:
        broker = ";".join(f"sentinel://127.0.0.1:{s.port}" for s in topology.sentinels) + "/0"
        store = topology.url(query=f"prefix={unique()}:&wait_replicas=1")
        schedule = {"tick": {"every": 1, "relay": {"catch_up": 30}}}
        with cluster(tmp_path, broker, store, schedule) as c:
            c.set(lease=4, heartbeat=0.5, queue_lease=15)
            beats = [c.beat(), c.beat()]
            c.worker(pool="threads", concurrency=2)
            c.wait_for("the first runs", lambda: len(c.events("end")) >= 3, 90)
            killed, _ = topology.fail_over()
            c.wait_for(
                "runs after the failover",
                lambda: max(e["at"] for e in c.events("end")) > killed + 5,
                120,
            )
            for beat in beats:
                c.kill(beat)
            c.wait_quiet()
            events = c.events()
    assert_every_second_once(events)
    after = [e for e in events if e["event"] == "end" and e["at"] > killed]
    assert len(after) >= 5

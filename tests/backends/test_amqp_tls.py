"""``amqps://`` with the CA and client certificate in the URL (``cacertfile``, ``certfile``,
``keyfile``): the broker's certificate and host name are verified, and a failed handshake is a
``BackendUnavailable`` naming the fix.

A TLS-only RabbitMQ of the test's own is not practical here (see the skipped test): the TLS
handshake is checked against ``openssl s_server``, a TLS endpoint with the test's certificates
that speaks no AMQP, and plain text against the shared broker's AMQP port.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay import open_backend
from relay.errors import BackendUnavailable, ConfigurationError
from tests.support.ports import free_port
from tests.support.services import require
from tests.support.tls import Certificates, certificates

pytestmark = pytest.mark.rabbitmq
FAST = "socket_timeout=2&connection_attempts=1"


@pytest.fixture
def certs(tmp_path: Path) -> Certificates:
    return certificates(tmp_path / "certs")


@pytest.fixture
def tls_endpoint(certs: Certificates) -> Iterator[int]:
    """``openssl s_server`` on a free loopback port with the server certificate; its port."""
    binary = shutil.which("openssl")
    if binary is None:
        pytest.skip("openssl is not installed")
    port = free_port()
    process = subprocess.Popen(
        [binary, "s_server", "-accept", f"127.0.0.1:{port}", "-cert", str(certs.server_cert),
         "-key", str(certs.server_key), "-quiet"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_listening(port, process)
        yield port
    finally:
        process.kill()
        process.wait(timeout=30)


def _wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    import socket
    import time

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert process.poll() is None, "openssl s_server exited"
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"openssl s_server did not listen on {port}")


def _opened(url: str) -> str:
    """The message of the ``BackendUnavailable`` opening ``url`` raises."""
    with pytest.raises(BackendUnavailable) as caught:
        open_backend(url)
    return str(caught.value)


def test_the_brokers_certificate_is_verified_against_the_ca_in_the_url(
    tls_endpoint: int, certs: Certificates
) -> None:
    base = f"amqps://relay:s3cret@127.0.0.1:{tls_endpoint}/%2F?{FAST}"
    wrong = _opened(f"{base}&cacertfile={certs.other_ca}")
    assert "did not verify" in wrong and "cacertfile=" in wrong and "s3cret" not in wrong
    assert "did not verify" in _opened(base)  # the system's CAs did not sign it
    by_name = f"amqps://relay:s3cret@localhost:{tls_endpoint}/%2F?{FAST}&cacertfile={certs.ca}"
    assert "Hostname mismatch" in _opened(by_name)
    # The right CA: the handshake passes, and only AMQP fails (the endpoint is no broker).
    right = _opened(f"{base}&cacertfile={certs.ca}")
    assert "TLS" not in right and "IncompatibleProtocolError" in right


def test_client_certificate_files_are_loaded(tls_endpoint: int, certs: Certificates) -> None:
    url = (
        f"amqps://relay:s3cret@127.0.0.1:{tls_endpoint}/%2F?{FAST}&cacertfile={certs.ca}"
        f"&certfile={certs.client_cert}&keyfile={certs.client_key}"
    )
    assert "TLS" not in _opened(url)


def test_tls_to_a_plain_text_port_says_so() -> None:
    base = require("rabbitmq").split("?")[0].replace("amqp://", "amqps://", 1)
    message = _opened(f"{base}?{FAST}")
    assert "TLS failed" in message and "port speaks TLS" in message


def test_tls_options_are_checked_when_the_backend_is_created(
    tmp_path: Path, certs: Certificates
) -> None:
    with pytest.raises(ConfigurationError, match="plain-text amqp://"):
        open_backend(f"amqp://h/%2F?cacertfile={certs.ca}")
    with pytest.raises(ConfigurationError, match="needs both"):
        open_backend(f"amqps://h/%2F?certfile={certs.client_cert}")
    with pytest.raises(ConfigurationError, match="cannot load its TLS files"):
        open_backend(f"amqps://h/%2F?mode=consumer&cacertfile={tmp_path}/missing.pem")


def test_a_tls_only_broker_of_the_tests_own() -> None:
    pytest.skip(
        "not practical here: a TLS-only RabbitMQ needs a broker node of its own (an Erlang node "
        "with its own node name, distribution port, database folder and cookie beside the shared "
        "broker's), which takes many seconds and much of a two-core machine to boot per test; "
        "TLS is checked against openssl s_server above"
    )

"""A password in a backend URL of any shape, malformed ones included, appears in no output.

Hypothesis builds URLs from shapes people get wrong (one slash, an unclosed ``[::1``, a host on a
SQLite URL, a port twice, no scheme's colon, a repeated or unknown option, a token ...) around a
generated password, with every scheme Relay knows and one it does not. Each URL goes through
what reads one: :func:`relay.backends._url.redact`, ``BackendURL``, ``open_backend`` (read-only:
nothing is created), the settings' check of ``BACKEND`` and
``relay runs --backend``. The error each raises (its whole chain, as a traceback prints it),
its ``repr``, the command's output and every log record (Relay's and the drivers', at DEBUG) must
not hold the password, nor its percent-encoded form. (A user name alone is no secret, but on
``nats://`` and ``tls://`` it is the token.)

Every host is the loopback (and every port one where nothing listens, where a shape keeps the
port): no traffic leaves the machine, and no store is opened for writing.
"""

from __future__ import annotations

import logging
import string
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

import relay
from relay.backends._url import BackendURL, redact
from relay.cli import main
from relay.settings import from_mapping
from tests.support.ports import free_port

CLOSED = free_port()
SCHEMES = [
    "sqlite", "postgresql", "postgres", "redis", "rediss", "valkey", "redis+sentinel", "amqp",
    "amqps", "nats", "tls", "REDIS", "nope",
]  # fmt: skip
SHAPES = [
    "{s}:/user:{pw}@127.0.0.1:{port}/0",
    "{s}:user:{pw}@127.0.0.1:{port}/0",
    "{s}//user:{pw}@127.0.0.1:{port}/0",
    "{s}://user:{pw}@[::1:{port}/0",
    "{s}://user:{pw}@[::1/0",
    "{s}://user:{pw}@127.0.0.1:{port}:{port}/0",
    "{s}://user:{pw}@127.0.0.1:port/0",
    "{s}://user:{pw}@/0",
    "{s}://user:{pw}@127.0.0.1:{port},:{port}/0",
    "{s}://:{pw}@127.0.0.1:{port}/0?timeout=soon",
    "{s}://user:{pw}@127.0.0.1:{port}/0?password={pw}&password=again",
    "{s}://user:{pw}@127.0.0.1:{port}/0?unknown=1&sslpassword={pw}",
    "{s}://{pw}@127.0.0.1:{port}/0",
    "{s}://{pw}@127.0.0.1:{port}/0?strategy=nope",
    " {s}://user:{pw}@127.0.0.1:{port}/0",
    "{s}://user:{pw}@127.0.0.1:{port}/0?token={pw}",
    "{s}://user:{pw}@127.0.0.1:{port}/x.db?strategy=claim",
    "{s}://user:{pw}@@127.0.0.1:{port}/0",
    "{s}://user:{pw}:more@127.0.0.1:{port}/0",
    "{s}:///user:{pw}@127.0.0.1:{port}/0",
    "{s}://user:{pw}@127.0.0.1:{port}/0#frag@ment",
]
# A password as people write them (URL-safe, no quote or backslash that a repr would escape),
# long enough that finding it in an output means it leaked.
PASSWORDS = st.text(string.ascii_letters + string.digits + "-._~!$()*+,", min_size=6).map(
    lambda text: f"Pw{text}"
)


class _Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += "".join(traceback.format_exception(*record.exc_info))
        self.lines.append(f"{text} {record.__dict__!r}")


@contextmanager
def _relay_logs() -> Iterator[_Captured]:
    logger, handler = logging.getLogger(), _Captured()  # every logger: Relay's and drivers'.
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _outcome(call: Callable[[], object]) -> str:
    """What a call shows: its value's repr, or its error's whole chain and repr."""
    try:
        value = call()
    except Exception as exc:
        return "".join(traceback.format_exception(exc)) + repr(exc)
    close = getattr(value, "close", None)
    if callable(close):
        close()
    return repr(value)


def _outputs(url: str) -> dict[str, str]:
    outputs = {
        "redact": redact(url),
        "BackendURL": _outcome(lambda: BackendURL(url).redacted()),
        "open_backend": _outcome(lambda: relay.open_backend(url, read_only=True)),
        "settings": _outcome(lambda: from_mapping({"BACKEND": url})),
    }
    done = CliRunner().invoke(main, ["runs", "--backend", url])
    outputs["relay runs"] = f"{done.output}{done.exception!r}"
    return outputs


def _quick(url: str, scheme: str) -> str:
    """A NATS URL waits 0.3 s for its closed port, not the default's seconds of retries."""
    if scheme not in ("nats", "tls"):
        return url
    url, hash_, fragment = url.partition("#")
    return f"{url}{'&' if '?' in url else '?'}timeout=0.3{hash_}{fragment}"


@pytest.mark.slow
@settings(
    max_examples=150,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a store's error takes ~1 s: no shrink
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(shape=st.sampled_from(SHAPES), scheme=st.sampled_from(SCHEMES), password=PASSWORDS)
def test_no_output_shows_the_password_of_a_malformed_url(
    shape: str,
    scheme: str,
    password: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))  # a SQLite path, if any, is read there
    assume(scheme in ("nats", "tls") or "//{pw}@" not in shape)  # else {pw} is a user name
    url = _quick(shape.format(s=scheme, pw=password, port=CLOSED), scheme)
    with _relay_logs() as logs:
        outputs = _outputs(url)
    outputs |= {f"log {i}": line for i, line in enumerate(logs.lines)}
    secrets = (password, quote(password, safe=""))
    leaks = {name: text for name, text in outputs.items() if any(s in text for s in secrets)}
    assert not leaks, (
        f"{url!r}: the password shows in {sorted(leaks)}: {next(iter(leaks.values()))}"
    )


def test_redact_masks_each_known_shape() -> None:
    """The shapes of the issue, and the well-formed ones, as they are shown."""
    shown = {
        "redis:/user:PASS@host": "redis:/user:***@host",
        "redis://user:PASS@[::1": "redis://user:***@[::1",
        "sqlite://user:PASS@host/x.db": "sqlite://user:***@host/x.db",
        "redis://u:PA@SS@host:6379/0": "redis://u:***@host:6379/0",
        "postgresql://u:p@a:5432,b/db?sslpassword=s&x=1": "postgresql://u:***@a:5432,b/db?sslpassword=***&x=1",
        "nats://TOKEN@host:4222": "nats://***@host:4222",
        "nats:/TOKEN@host": "nats:/***@host",
        "redis://user@host/0": "redis://user@host/0",
        "redis://host:6379/0?password=p": "redis://host:6379/0?password=***",
        "sqlite:///relay.db": "sqlite:///relay.db",
    }
    assert {url: redact(url) for url in shown} == shown

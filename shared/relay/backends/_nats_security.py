"""What the NATS backends need to connect to a locked-down server: TLS with a CA and client
certificate from the URL, and the subjects a least-privilege user must be allowed.

The URL options are named as the ``nats`` command line names them: ``tlsca``, ``tlscert`` and
``tlskey``. The server's certificate is always verified, host name included; no URL option turns
that off.
"""

from __future__ import annotations

import re
import ssl
import time

from relay.backends._tls import verified_context
from relay.backends._url import BackendURL
from relay.errors import BackendUnavailable

__all__ = [
    "TLS_OPTIONS",
    "PermissionWatch",
    "connect_fix",
    "dedup_permissions",
    "kv_permissions",
    "kv_user",
    "tls_context",
]

TLS_OPTIONS = ("tlsca", "tlscert", "tlskey")
"""URL options of a NATS backend for TLS: a CA file, a client certificate and its key."""
# nats-py hands the server's -ERR on in lower case: the subject's case is found again below.
_VIOLATION = re.compile(r"permissions violation for (publish|subscription) to \"?([^\"' ]+)", re.I)


def tls_context(parsed: BackendURL) -> ssl.SSLContext | None:
    """A verifying TLS context from the URL's ``tlsca``/``tlscert``/``tlskey``, else ``None``.

    ``None`` leaves TLS to the driver: ``tls://`` (or a server that requires TLS) is then
    verified against the system's CAs.
    """
    return verified_context(parsed, TLS_OPTIONS, "NATS")


def connect_fix(error: BaseException) -> str:
    """What to check when a connection failed with ``error``."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return (
            "the server's certificate did not verify: give the CA that signed it in the URL "
            "(?tlsca=/path/ca.pem), and reach the server by a host name its certificate names"
        )
    if isinstance(error, ssl.SSLError):
        return "TLS failed: check tlsca, and tlscert and tlskey where the server asks for them"
    return "check that the server is up and the URL's host, port and credentials"


def kv_permissions(bucket: str) -> list[str]:
    """The subjects a NATS user must be allowed to publish to, to run Relay on ``bucket``.

    The KV bucket and the instances' bucket beside it, and the JetStream API requests on their
    streams only. Replies come on ``_INBOX.>``, the one subject the user must subscribe to.
    """
    subjects = []
    for name in (bucket, f"{bucket}-instances"):
        stream = f"KV_{name}"
        subjects += [
            f"$KV.{name}.>",
            f"$JS.API.STREAM.INFO.{stream}",
            f"$JS.API.STREAM.CREATE.{stream}",
            f"$JS.API.STREAM.MSG.GET.{stream}",
            f"$JS.API.CONSUMER.CREATE.{stream}",
            f"$JS.API.CONSUMER.CREATE.{stream}.>",
            f"$JS.API.CONSUMER.INFO.{stream}.>",
            f"$JS.API.CONSUMER.DELETE.{stream}.>",
        ]
    return subjects


def dedup_permissions(stream: str) -> list[str]:
    """The subjects a NATS user must be allowed to publish to, for ``strategy=dedup`` on
    ``stream``: its claims subject and the creation of its stream (replies on ``_INBOX.>``)."""
    return [f"relay-claims.{stream}", f"$JS.API.STREAM.CREATE.{stream}"]


def kv_user(bucket: str, user: str) -> str:
    """The ``authorization { users = [...] }`` entry of a nats-server configuration for Relay."""
    subjects = "".join(f'        "{subject}",\n' for subject in kv_permissions(bucket))
    return (
        f"{{\n  user: {user}\n  password: PASSWORD\n  permissions: {{\n"
        f"    publish: {{ allow: [\n{subjects}    ] }}\n"
        '    subscribe: { allow: ["_INBOX.>"] }\n  }\n}'
    )


class PermissionWatch:
    """Remembers the server's last "Permissions Violation", to explain a request left unanswered.

    NATS does not answer a request the user may not publish: the caller only sees a timeout. The
    server sends the violation apart, to the client's error callback, which calls :meth:`saw`.
    """

    def __init__(self, where: str, subjects: list[str]) -> None:
        self._where, self._subjects = where, subjects
        self._last: tuple[float, str, str] | None = None

    def saw(self, error: object) -> None:
        """Keep ``error`` if it is a permissions violation."""
        found = _VIOLATION.search(str(error))
        if found:
            self._last = (time.monotonic(), found.group(1).lower(), found.group(2))

    def explain(self, within: float) -> BackendUnavailable | None:
        """The violation seen in the last ``within`` seconds, naming what to allow; else None."""
        if self._last is None or time.monotonic() - self._last[0] > within:
            return None
        _, kind, subject = self._last
        allow = "publish" if kind == "publish" else "subscribe"
        subject = _cased(subject, self._subjects)
        return BackendUnavailable(
            f"NATS at {self._where} refused this user {kind} to {subject!r}, so the "
            f"request went unanswered: add it to the user's {allow} allow list. Relay's user "
            f"needs publish {self._subjects} and subscribe ['_INBOX.>'] "
            "(see docs/security.md)"
        )


def _cased(subject: str, subjects: list[str]) -> str:
    """The allow-list entry a (lower-cased) refused subject falls under, or the subject itself."""
    for allowed in [*subjects, "_INBOX.>"]:
        wanted = allowed.lower()
        if subject.lower() == wanted or (
            wanted.endswith(".>") and subject.lower().startswith(wanted[:-1])
        ):
            return allowed
    return subject

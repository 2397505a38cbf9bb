"""Parsing backend URLs once, refusing options nobody reads."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from relay.errors import ConfigurationError

__all__ = ["BackendURL", "redact"]

_TOKEN_SCHEMES = ("nats", "tls")
_FLAGS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_SECRET_OPTION = re.compile(r"(?i)([?&;#](?:[^=&;#?]*password|[^=&;#?]*token)=)[^&;#]*")


def redact(url: str) -> str:
    """``url`` with whatever may be a secret as ``***``, whatever its shape, for any output.

    It reads the text, never a parse that a malformed URL could defeat (``redis:/u:pw@host``,
    an unclosed ``[::1``): the user information runs from after the scheme and its slashes to the
    **last** ``@`` of the text, and everything in it after its first ``:`` is the password (a
    NATS token: all of it, on ``nats://`` and ``tls://``); so are the values of options named
    ``*password`` or ``*token``. A URL with an ``@`` in its path or query may show less than it
    could; it never shows more.
    """
    text = _SECRET_OPTION.sub(r"\1***", url)
    span = _secret_span(text)
    return text if span is None else f"{text[: span[0]]}***{text[span[1] :]}"


def _secret_span(text: str) -> tuple[int, int] | None:
    """Where :func:`redact` finds the password (or NATS token) in ``text``: ``None`` if nowhere."""
    at = text.rfind("@")
    if at < 0:
        return None
    scheme = _SCHEME.match(text)
    start = scheme.end() if scheme else 0
    while start < at and text[start] in "/\\":
        start += 1
    colon = text.find(":", start, at)
    if colon >= 0:
        return colon + 1, at
    token = scheme is not None and scheme.group()[:-1].lower() in _TOKEN_SCHEMES
    return (start, at) if token and start < at else None


class BackendURL:
    """A backend URL split into its parts, with its query options checked against a known set."""

    def __init__(self, url: str) -> None:
        if not isinstance(url, str):
            raise ConfigurationError(
                f"a backend URL must be a string such as 'sqlite:///relay.db' or "
                f"'redis://localhost:6379/0', not {type(url).__name__}"
            )
        if "://" not in url:
            raise ConfigurationError(
                f"backend URL {redact(url)!r} is malformed: expected 'scheme://…', "
                "such as 'sqlite:///relay.db' or 'redis://localhost:6379/0'"
            )
        self.url = url
        try:
            self.parts = urlsplit(url)
        except ValueError as exc:  # such as an unclosed "[" around an IPv6 host
            raise ConfigurationError(
                f"backend URL {redact(url)!r} is malformed: {redact(str(exc))}"
            ) from None
        self.scheme = self.parts.scheme.lower()
        try:
            pairs = parse_qsl(self.parts.query, keep_blank_values=True, strict_parsing=False)
        except ValueError as exc:
            raise ConfigurationError(
                f"backend URL {redact(url)!r} has a malformed query: {redact(str(exc))}"
            ) from None
        self.options = dict(pairs)
        self._check_secret_in_place()
        self.hosts = self._hosts()
        """Every ``(host, port)`` the URL names, in order; more than one in a multi-host URL
        (``postgresql://a:5432,b:5432/db``). ``port`` is ``None`` where the URL gives none."""
        repeated = sorted(key for key, count in Counter(k for k, _ in pairs).items() if count > 1)
        if repeated:
            raise ConfigurationError(
                f"backend URL {self.redacted()!r} gives the option(s) {', '.join(repeated)} more "
                "than once; give each once"
            )

    def _check_secret_in_place(self) -> None:
        """Refuse a URL whose password is not where a URL's grammar puts it (a drivers would
        take it for a host, a path or a virtual host, and might print it)."""
        span = _secret_span(self.url)
        if span is None:
            return
        token = self.scheme in _TOKEN_SCHEMES and self.parts.password is None
        parsed = self.parts.username if token else self.parts.password
        if self.url[span[0] : span[1]] != parsed:
            raise ConfigurationError(
                f"backend URL {self.redacted()!r} is malformed: its user and password are not "
                "between 'scheme://' and the host; write scheme://user:password@host:port/…, "
                "with any '@', ':', '/', '?' or '#' of the password percent-encoded (%40 for '@')"
            )

    @property
    def multi_host(self) -> bool:
        """Whether the URL names more than one host (``host1:port1,host2:port2``)."""
        return len(self.hosts) > 1

    def _hosts(self) -> list[tuple[str, int | None]]:
        hostlist = self.parts.netloc.rpartition("@")[2]
        if not hostlist:
            return []
        return [self._host(item) for item in hostlist.split(",")]

    def _host(self, item: str) -> tuple[str, int | None]:
        """One ``host[:port]`` (``[v6]:port`` for IPv6) of the host list."""
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else (rest or None)
        else:
            host, colon, port_text = item.rpartition(":")
            host, port = (host, port_text) if colon else (item, None)
        if not host:
            raise ConfigurationError(
                f"backend URL {self.redacted()!r} has an empty host in {item!r}: write "
                "host:port, or host1:port1,host2:port2 where the backend takes several hosts"
            )
        if port is None or port == "":
            return host, None
        if not port.isdigit() or int(port) > 65535:
            raise ConfigurationError(
                f"backend URL {self.redacted()!r} has a malformed port ({port!r}): "
                "write host:port with a port from 0 to 65535, such as localhost:6379"
            )
        return host, int(port)

    def check_options(self, known: Iterable[str], backend: str) -> None:
        """Refuse query options the backend does not read, naming those it does."""
        allowed = set(known)
        unknown = sorted(set(self.options) - allowed)
        if unknown:
            names = ", ".join(sorted(allowed)) or "none"
            raise ConfigurationError(
                f"{backend} does not know the URL option(s) {', '.join(unknown)}; it reads: {names}"
            )

    def option(self, name: str, default: str) -> str:
        """A query option's value, or ``default``."""
        return self.options.get(name, default)

    def float_option(self, name: str, default: float) -> float:
        """A query option that must be a positive, finite number."""
        raw = self.options.get(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not value > 0 or math.isinf(value):
            raise ConfigurationError(f"URL option {name}={raw!r} must be a positive number")
        return value

    def flag_option(self, name: str, default: bool) -> bool:
        """A yes/no query option: ``true``/``false``, ``yes``/``no`` or ``1``/``0``."""
        raw = self.options.get(name)
        if raw is None:
            return default
        if raw.lower() not in _FLAGS:
            raise ConfigurationError(
                f"URL option {name}={raw!r} must be true or false (yes/no and 1/0 also work)"
            )
        return _FLAGS[raw.lower()]

    def without_options(self, names: Iterable[str]) -> str:
        """The URL with the named query options removed (to hand the rest to a driver)."""
        drop = set(names)
        kept = [f"{k}={v}" for k, v in self.options.items() if k not in drop]
        return urlunsplit(self.parts._replace(query="&".join(kept)))

    def redacted(self) -> str:
        """The URL with any secret as ``***``, for messages (:func:`redact`): the password, a
        NATS token (``nats://TOKEN@host``: a user name with no password), and the options that
        carry one (named ``*password``, such as libpq's ``sslpassword``, or ``*token``)."""
        return redact(self.url)

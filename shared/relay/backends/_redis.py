"""What the Redis claim and lease backends share: key names, the URL, and driver errors.

Every key of a job starts with ``<prefix>{<job>}:``: the hash tag keeps a job's keys in one
Cluster slot, and both backends name them so (the claim backend's keys end in ``claim…``, which no
lease key does). Changing :func:`job_base` would orphan every store already written.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import redis
from redis.exceptions import AuthenticationError, RedisClusterException, RedisError, ResponseError

from relay.backends._url import BackendURL
from relay.errors import BackendUnavailable, ConfigurationError

DEFAULT_PREFIX = "relay:"
"""The start of every key unless the URL's ``prefix`` says otherwise."""
_SCHEMES = {"valkey": "redis", "valkeys": "rediss"}
_UNESCAPED = {"25": "%", "7B": "{", "7D": "}"}


_PREFIX = re.compile(r"[A-Za-z0-9_.:/-]{0,100}")


def check_prefix(prefix: str) -> None:
    """Refuse a key prefix that is not plain text: a brace would end a job's hash tag early, and
    a glob character (``*?[]\\``) would make Relay's key patterns match other applications' keys
    (and break an ACL rule written for the prefix)."""
    if not _PREFIX.fullmatch(prefix):
        raise ConfigurationError(
            f"Redis key prefix {prefix!r} is not usable (braces would break the per-job hash "
            "tags, glob characters would match other keys): use at most 100 letters, digits "
            "and '_', '-', '.', ':', '/', such as ?prefix=relay: or ?prefix=myapp:relay:"
        )


def job_base(prefix: str, job: str) -> str:
    """``<prefix>{<job>}:``, the start of every key of ``job``."""
    # Escape braces so a job's name can never end its hash tag early.
    tag = job.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")
    return f"{prefix}{{{tag}}}:"


def job_name(prefix: str, base: str) -> str:
    """The job whose base key (:func:`job_base`) is ``base``."""
    tag = base[len(prefix) + 1 : -2]
    return re.sub(r"%(25|7B|7D)", lambda m: _UNESCAPED[m.group(1)], tag)


def split_run_key(prefix: str, key: str) -> tuple[str, str]:
    """A run's key, ``<base>run:<member>``, as its job's base key and the member."""
    # The tag holds no '}' (job_base escapes it), so the first '}:' after the prefix ends it.
    end = key.index("}:", len(prefix)) + 2
    return key[:end], key[end + len("run:") :]


def driver_url(parsed: BackendURL, ours: Sequence[str]) -> str:
    """The URL for redis-py: without Relay's options ``ours``, ``valkey`` spelled ``redis``."""
    database = parsed.parts.path.strip("/")
    if database and not database.isdigit():
        raise ConfigurationError(
            f"Redis URL {parsed.redacted()} names database {database!r}: a database is a "
            "number, as in redis://localhost:6379/0"
        )
    url = parsed.without_options(ours)
    return _SCHEMES.get(parsed.scheme, parsed.scheme) + url[len(parsed.scheme) :]


@contextmanager
def translated(where: str) -> Iterator[None]:
    """Raise redis-py's errors as :class:`~relay.errors.BackendUnavailable` naming ``where``."""
    try:
        yield
    except AuthenticationError as exc:
        raise BackendUnavailable(
            f"{where} refused the credentials ({exc}): check the user name and password "
            "in the URL (redis://user:password@host:port/db)"
        ) from exc
    except redis.ConnectionError as exc:
        raise BackendUnavailable(
            f"{where} cannot be reached ({exc}): check that the server is running and that the "
            "host and port in the URL are right"
        ) from exc
    except ResponseError as exc:
        hint = ""
        if "DB index" in str(exc):
            hint = "; use a database number the server has (0-15 unless configured)"
        raise BackendUnavailable(f"{where} refused a command: {exc}{hint}") from exc
    except (RedisError, RedisClusterException) as exc:
        raise BackendUnavailable(f"{where} failed: {exc}") from exc


def time_ms(reply: Sequence[int]) -> int:
    """The server's clock, a ``TIME`` reply (seconds, microseconds), in whole milliseconds."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000

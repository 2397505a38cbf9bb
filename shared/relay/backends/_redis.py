"""What the Redis claim and lease backends share: key names, the URL, and driver errors.

Every key of a job starts with ``<prefix>{<job>}:``: the hash tag keeps a job's keys in one
Cluster slot, and both backends name them so (the claim backend's keys end in ``claim…``, which no
lease key does). Changing :func:`job_base` would orphan every store already written.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import redis
from redis.exceptions import (
    AuthenticationError,
    NoPermissionError,
    RedisClusterException,
    RedisError,
    ResponseError,
)
from redis.sentinel import MasterNotFoundError

from relay.backends._url import BackendURL
from relay.errors import BackendUnavailable, ConfigurationError

DEFAULT_PREFIX = "relay:"
"""The start of every key unless the URL's ``prefix`` says otherwise."""
_SCHEMES = {"valkey": "redis", "valkeys": "rediss"}
_UNESCAPED = {"25": "%", "7B": "{", "7D": "}"}

ACL_COMMANDS = (
    # the connection: health checks and a database number (redis-py's CLIENT SETINFO, refused,
    # is ignored by redis-py, and Redis before 7.2 does not know it)
    "ping", "select",
    # the backends' own calls
    "evalsha", "eval", "script|load", "time", "info", "wait", "scan", "exists", "get", "set",
    "sadd", "srem", "smembers", "sismember", "multi", "exec", "xadd", "xrevrange",
    # the commands the Lua scripts call (Redis checks them against the user too)
    "del", "hdel", "hexists", "hgetall", "hmget", "hset", "pexpire", "pexpireat", "pttl",
    "zadd", "zrange", "zrangebyscore", "zrem", "zrevrange", "zscore",
)  # fmt: skip
"""Every command Relay's Redis backends send, directly or from their scripts: what a
least-privilege ACL user needs (:func:`acl_rule`). The claim strategy ``idmp`` (Redis 8.6+)
also needs ``+xcfgset``, a command older servers refuse in an ACL rule."""


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
    return hostname_checked(_SCHEMES.get(parsed.scheme, parsed.scheme) + url[len(parsed.scheme) :])


def hostname_checked(url: str) -> str:
    """A ``rediss://`` driver URL that checks the server's host name unless it says otherwise.

    redis-py checks it by default only since 6.0; before, a certificate of any host was taken.
    The URL's ``ssl_check_hostname`` wins, and ``ssl_cert_reqs=none`` (no verification) needs none.
    """
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    if parts.scheme != "rediss" or "ssl_check_hostname" in query:
        return url
    if query.get("ssl_cert_reqs", "").lower() in ("none", "cert_none"):
        return url
    return urlunsplit(
        parts._replace(query="&".join(filter(None, [parts.query, "ssl_check_hostname=true"])))
    )


def acl_rule(prefix: str = DEFAULT_PREFIX, user: str = "relay") -> str:
    """The ``ACL SETUSER`` line of a user that may do what Relay does under ``prefix``, no more.

    Its keys are those starting with the prefix; its commands are :data:`ACL_COMMANDS`; it may
    use no Pub/Sub channel. ``docs/security.md`` shows it, and a test runs instances as that user.
    """
    commands = " ".join(f"+{command}" for command in ACL_COMMANDS)
    return f"ACL SETUSER {user} on >PASSWORD resetkeys ~{prefix}* resetchannels -@all {commands}"


def _permission_hint(exc: ResponseError) -> str:
    """What to grant, for a command or key the server's ACL refused."""
    named = re.search(r"run the '([^']+)' command", str(exc))
    if named:
        missing = f"add +{named.group(1).lower()} to the user's ACL rules"
    elif "keys" in str(exc):
        missing = "allow the keys of Relay's prefix (~<prefix>*)"
    else:  # a command called by a script: the server does not say which
        missing = "a command one of Relay's scripts calls is not allowed"
    return f"{missing}; Relay's user needs: {acl_rule('<prefix>', '<user>')} (docs/security.md)"


# redis-py names each sentinel that failed by its client's repr (since 8.2 with every connection
# setting in it): the address is what an operator needs.
_SENTINEL_CLIENT = re.compile(
    r"<redis\.client\.Redis\(.*?host=([^,]+),port=(\d+),.*?\)>\)>\)>"  # 8.2 and later
    r"|Redis<ConnectionPool<\w*Connection<host=([^,]+),port=(\d+)[^>]*>>>"  # before 8.2
)


def _sentinel_address(found: re.Match[str]) -> str:
    """``sentinel host:port`` for one repr :data:`_SENTINEL_CLIENT` found."""
    return f"sentinel {found[1] or found[3]}:{found[2] or found[4]}"


@contextmanager
def translated(where: str) -> Iterator[None]:
    """Raise redis-py's errors as :class:`~relay.errors.BackendUnavailable` naming ``where``."""
    try:
        yield
    except NoPermissionError as exc:
        raise BackendUnavailable(
            f"{where} refused a command for lack of permission ({exc}): {_permission_hint(exc)}"
        ) from exc
    except MasterNotFoundError as exc:
        reasons = _SENTINEL_CLIENT.sub(_sentinel_address, str(exc))
        if "unknown command 'SENTINEL'" in reasons:
            fix = "a redis+sentinel:// URL lists the sentinels (port 26379), not the data nodes"
        else:
            fix = (
                "check that the sentinels run, that the URL lists them (host:port, port 26379 "
                "by default) and names the service they monitor, and that a failover is not "
                "under way"
            )
        raise BackendUnavailable(
            f"{where}: no sentinel names a primary ({reasons}): {fix}"
        ) from exc
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
        if "can't run this command" in str(exc):  # refused inside a script
            raise BackendUnavailable(
                f"{where} refused a command for lack of permission ({exc}): {_permission_hint(exc)}"
            ) from exc
        hint = ""
        if "DB index" in str(exc):
            hint = "; use a database number the server has (0-15 unless configured)"
        elif "unknown command 'SENTINEL'" in str(exc):
            hint = "; a redis+sentinel:// URL lists the sentinels (port 26379), not the data nodes"
        raise BackendUnavailable(f"{where} refused a command: {exc}{hint}") from exc
    except (RedisError, RedisClusterException) as exc:
        raise BackendUnavailable(f"{where} failed: {exc}") from exc


def time_ms(reply: Sequence[int]) -> int:
    """The server's clock, a ``TIME`` reply (seconds, microseconds), in whole milliseconds."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000

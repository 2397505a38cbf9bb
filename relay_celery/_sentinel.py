"""kombu's Redis Sentinel broker as Relay's ``redis+sentinel://`` store URL.

kombu names the sentinels in one broker URL, ``sentinel://[user:password@]h1:26379;sentinel://
h2:26379[/DB]``, and the service in ``broker_transport_options["master_name"]``; the first URL's
user and password are the data nodes', and ``broker_transport_options["sentinel_kwargs"]`` may
hold the sentinels' own. ``broker_use_ssl`` means TLS to the data nodes.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from relay.errors import ConfigurationError

__all__ = ["is_sentinel_broker", "sentinel_store_url"]

_CERT_REQS = {ssl.CERT_NONE: "none", ssl.CERT_OPTIONAL: "optional", ssl.CERT_REQUIRED: "required"}
_SSL_PATHS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")


def is_sentinel_broker(broker: object) -> bool:
    """Whether a Celery ``broker_url`` is kombu's Redis Sentinel transport."""
    return isinstance(broker, str) and broker.lower().startswith("sentinel://")


def sentinel_store_url(broker: str, transport_options: Mapping[str, Any], use_ssl: Any) -> str:
    """The ``redis+sentinel://`` URL of the Redis that kombu's Sentinel broker reaches."""
    urls = [urlsplit(part.strip()) for part in broker.split(";") if part.strip()]
    if any(url.scheme.lower() != "sentinel" or not url.hostname for url in urls):
        raise ConfigurationError(
            "a Sentinel broker_url lists sentinel://host:port URLs separated by ';', such as "
            "'sentinel://h1:26379;sentinel://h2:26379/0'; set app.conf.relay_backend to a "
            "redis+sentinel:// URL instead"
        )
    service = transport_options.get("master_name")
    if not isinstance(service, str) or not service:
        raise ConfigurationError(
            "the broker is Redis Sentinel but broker_transport_options has no 'master_name' "
            "(the service the sentinels monitor): set it, as kombu needs it too"
        )
    first = urls[0]
    credentials = first.netloc.rpartition("@")[0]
    hosts = ",".join(url.netloc.rpartition("@")[2] for url in urls)
    database = first.path.strip("/")
    path = f"/{quote(service, safe='')}" + (f"/{database}" if database.isdigit() else "")
    options = _sentinel_options(transport_options.get("sentinel_kwargs"))
    options.update(_ssl_options(use_ssl))
    scheme = "rediss+sentinel" if use_ssl else "redis+sentinel"
    query = f"?{urlencode(options)}" if options else ""
    return f"{scheme}://{credentials}{'@' if credentials else ''}{hosts}{path}{query}"


def _sentinel_options(sentinel_kwargs: Any) -> dict[str, str]:
    """``sentinel_password`` / ``sentinel_username`` from kombu's ``sentinel_kwargs``."""
    if not isinstance(sentinel_kwargs, Mapping):
        return {}
    names = {"password": "sentinel_password", "username": "sentinel_username"}
    return {names[k]: str(v) for k, v in sentinel_kwargs.items() if k in names and v}


def _ssl_options(use_ssl: Any) -> dict[str, str]:
    """The TLS options of ``broker_use_ssl`` a URL can carry (file paths, ``ssl_cert_reqs``)."""
    if not isinstance(use_ssl, Mapping):
        return {}
    options = {name: str(use_ssl[name]) for name in _SSL_PATHS if use_ssl.get(name)}
    reqs = use_ssl.get("ssl_cert_reqs")
    if reqs is not None:
        options["ssl_cert_reqs"] = _CERT_REQS.get(reqs, str(reqs))
    return options

"""A verified TLS context from the CA and client certificate files a backend URL names.

Verification (the certificate and the host name) is never turned off here: the context is
Python's default, with the URL's CA added.
"""

from __future__ import annotations

import ssl

from relay.backends._url import BackendURL
from relay.errors import ConfigurationError

__all__ = ["verified_context"]


def verified_context(
    parsed: BackendURL, names: tuple[str, str, str], store: str
) -> ssl.SSLContext | None:
    """The context for the URL's ``names`` (CA, certificate, key options), ``None`` if it
    gives none of them; ``store`` names the URL's kind in messages ("NATS", "AMQP")."""
    ca, cert, key = (parsed.options.get(name) for name in names)
    if ca is None and cert is None and key is None:
        return None
    if (cert is None) != (key is None):
        raise ConfigurationError(
            f"{store} URL {parsed.redacted()!r} gives only one of {names[1]} and {names[2]}: a "
            f"client certificate needs both (?{names[1]}=/path/client.pem&{names[2]}=/path/"
            "client.key)"
        )
    try:
        context = ssl.create_default_context(cafile=ca)
        if cert is not None:
            context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(
            f"{store} URL {parsed.redacted()!r}: cannot load its TLS files ({exc}); give readable "
            f"PEM files in {', '.join(names[:2])} and {names[2]}"
        ) from None
    return context

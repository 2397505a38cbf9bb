"""Loopback ports for the servers the tests start.

A port the kernel hands out as free (a bind to port 0) comes from Linux's ephemeral range
(32768-60999 by default), where outgoing connections take their source ports: fine for a server
that binds it at once, but a port named before its server binds it (a cluster's route ports, a
node restarted on its old port) could be taken in between. :func:`pick_ports` draws such ports
from a range below it instead.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Container

__all__ = ["bindable", "free_port", "pick_ports"]


def bindable(port: int) -> bool:
    """Whether nothing on 127.0.0.1 holds ``port`` now."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port of 127.0.0.1 that nothing holds now, for a server that binds it at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pick_ports(count: int, ports: range, avoid: Container[int] = ()) -> list[int]:
    """``count`` different ports of ``ports``, none in ``avoid``, that nothing holds now."""
    picked: list[int] = []
    while len(picked) < count:
        port = random.choice(ports)
        if port not in picked and port not in avoid and bindable(port):
            picked.append(port)
    return picked

"""Free TCP ports for the servers tests start (on 127.0.0.1 unless told)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Below the kernel's ephemeral range (and Kubernetes' NodePort range, 30000-32767): the kernel
# never gives such a port to an outgoing connection between our check and the server's bind, as
# it may give one of its own picks (seen: a container's bind refused with "address in use").
FIRST, LAST = 10000, 30000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_pick = random.SystemRandom()  # not the seeded `random`: each test would get the same ports


def _first_ephemeral() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, on any address (a server of another test worker may bind
    0.0.0.0, and a control plane the pod network's address), outside the kernel's ephemeral
    range where it allows."""
    last = min(LAST, _first_ephemeral())
    for _ in range(200 if last > FIRST else 0):
        port = _pick.randrange(FIRST, last)
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", port))  # free on every address, `host` among them
            except OSError:
                continue  # in use: another pick
            return port
    with socket.socket() as sock:  # a machine whose ephemeral range starts low: the kernel's pick
        sock.bind((host, 0))
        return sock.getsockname()[1]

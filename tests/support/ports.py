"""Free TCP ports for the servers tests start (on 127.0.0.1 unless told)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the kernel's pick, released at once for the caller)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]

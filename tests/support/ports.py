"""Free TCP ports on 127.0.0.1 for the servers tests start."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick, released at once for the caller)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

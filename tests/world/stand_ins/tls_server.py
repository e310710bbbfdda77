"""A threading HTTPS server whose TLS handshakes happen in each connection's own thread.

Wrapping the listening socket (`context.wrap_socket(server.socket)`) makes every handshake run
in the accept loop, one at a time: under a burst of connections (rclone opens dozens) clients
queue behind each other and time out, which is a property of the test server, not of the code
under test."""

from __future__ import annotations

import contextlib
import socket
import ssl
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class TlsThreadingHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        context: ssl.SSLContext,
    ) -> None:
        super().__init__(address, handler)
        self.context = context

    def get_request(self) -> tuple[Any, Any]:
        sock, address = super().get_request()
        wrapped = self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return wrapped, address

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.do_handshake()  # in this connection's thread
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away or refused the certificate: its own test says so

    def shutdown_request(self, request: Any) -> None:
        with contextlib.suppress(OSError):
            request.shutdown(socket.SHUT_WR)
        request.close()

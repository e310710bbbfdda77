"""A threading HTTPS server whose TLS handshakes happen in each connection's own thread.

Wrapping the listening socket (`context.wrap_socket(server.socket)`) makes every handshake run
in the accept loop, one at a time: under a burst of connections (rclone opens dozens) clients
queue behind each other and time out, which is a property of the test server, not of the code
under test."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from certs.issue import ServingSpec, issue_bundle
from certs.reloader import CertReloader


class TlsThreadingHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        handler: Callable[..., BaseHTTPRequestHandler],
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


def start_https(
    name: str, handler: Callable[..., BaseHTTPRequestHandler], host: str = "127.0.0.1"
) -> tuple[TlsThreadingHTTPServer, bytes]:
    """A server on `host` (127.0.0.1, or the pod network's address; a free port) with a
    certificate for it from a fresh private CA, already serving in a daemon thread; (server, the
    CA bundle clients must trust)."""
    bundle = issue_bundle(ServingSpec(name, "test", ips=[host]))
    reloader = CertReloader()
    reloader.reload(bundle)
    server = TlsThreadingHTTPServer((host, 0), handler, reloader.context)
    threading.Thread(target=server.serve_forever, daemon=True, name=f"{name}-https").start()
    return server, bundle.ca_bundle_pem


def send_json(handler: BaseHTTPRequestHandler, status: int, value: Any) -> None:
    data = json.dumps(value).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)

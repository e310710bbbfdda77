"""An HTTP reverse proxy in front of a storage emulator that answers as a throttled service does
while `failing` is set (Azure's `503 ServerBusy`, with its `x-ms-error-code` header), and
forwards every request unchanged otherwise: a transient outage that a test ends when it likes."""

from __future__ import annotations

import http.client
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}


class FlakyProxy:
    def __init__(self, upstream: str, host: str = "127.0.0.1") -> None:
        target = urllib.parse.urlsplit(upstream)
        self.failing = threading.Event()
        self.refused = 0  # requests answered with the outage
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.failing.is_set():
                    proxy.refused += 1
                    message = b"The server is busy."
                    self.send_response(503, "Server Busy")
                    self.send_header("x-ms-error-code", "ServerBusy")
                    self.send_header("Content-Length", str(len(message)))
                    self.end_headers()
                    self.wfile.write(message)
                    return
                upstream_conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                upstream_conn.request(self.command, self.path, body or None, headers)
                answer = upstream_conn.getresponse()
                data = answer.read()
                self.send_response(answer.status, answer.reason)
                for name, value in answer.getheaders():
                    if name.lower() not in HOP_BY_HOP | {"content-length"}:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                upstream_conn.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _relay

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self.base = f"http://{host}:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def flaky_proxy(upstream: str, host: str = "127.0.0.1") -> Iterator[FlakyProxy]:
    """`host`: 127.0.0.1, or the pod network's address for loaders on the real node."""
    proxy = FlakyProxy(upstream, host)
    try:
        yield proxy
    finally:
        proxy.stop()

"""The played kubelet's log endpoint.

As in a real cluster, `GET /api/v1/namespaces/NS/pods/NAME/log` is answered by the node: the real
kube-apiserver validates the container (pkg/registry/core/pod/strategy.go LogLocation), finds
the node's address and kubelet port in the Node's status (`daemonEndpoints.kubeletEndpoint.Port`)
and proxies to the kubelet's `/containerLogs/NS/NAME/CONTAINER`, which applies `tailLines` and
`limitBytes` to the container's log. It is served over HTTPS, as a real kubelet does on 10250
(the server does not verify a kubelet's certificate unless --kubelet-certificate-authority is
set).
"""

from __future__ import annotations

import ssl
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

LogPath = Callable[[str, str, str], Path]


def tail(data: bytes, tail_lines: int | None, limit_bytes: int | None) -> bytes:
    """The kubelet's selection: the last `tail_lines` lines, then at most `limit_bytes` of them
    from the start of that selection."""
    if tail_lines is not None:
        lines = data.splitlines(keepends=True)
        data = b"".join(lines[-tail_lines:]) if tail_lines > 0 else b""
    if limit_bytes is not None:
        data = data[:limit_bytes]
    return data


def _int_param(query: Mapping[str, list[str]], name: str) -> int | None:
    values = query.get(name)
    if not values:
        return None
    try:
        return int(values[0])
    except ValueError:
        return None


class KubeletLogServer:
    """`/containerLogs/{namespace}/{pod}/{container}` over the fake kubelet's log files."""

    def __init__(self, log_path: LogPath, tls: ssl.SSLContext) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner._serve(self)

            def log_message(self, *_args: Any) -> None:
                pass

        self._log_path = log_path
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="kubelet-logs", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(handler.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._reply(handler, 404, b"404 page not found\n")
            return
        _, namespace, pod, container = parts
        path = self._log_path(namespace, pod, container)
        if not path.exists():
            message = f'container "{container}" in pod "{pod}" is waiting to start: '
            self._reply(handler, 400, (message + "ContainerCreating").encode())
            return
        query = urllib.parse.parse_qs(url.query)
        lines, limit = _int_param(query, "tailLines"), _int_param(query, "limitBytes")
        body = tail(path.read_bytes(), lines, limit)
        self._reply(handler, 200, body)

    @staticmethod
    def _reply(handler: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "text/plain")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

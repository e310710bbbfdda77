"""The fake kubelet's log endpoint, and the API server's side of `pods/log`.

As in a real cluster, `GET /api/v1/namespaces/NS/pods/NAME/log` is answered by the node: the API
server validates the container (pkg/registry/core/pod/strategy.go LogLocation), finds the node's
address and kubelet port in the Node's status (`daemonEndpoints.kubeletEndpoint.Port`) and
proxies to the kubelet's `/containerLogs/NS/NAME/CONTAINER`, which applies `tailLines` and
`limitBytes` to the container's log. For the emulator the fake kubelet serves plain HTTP on
loopback; for the real kube-apiserver, HTTPS, as a real kubelet does on 10250 (the server does
not verify a kubelet's certificate unless --kubelet-certificate-authority is set).
"""

from __future__ import annotations

import ssl
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import aiohttp

from tests.world.kubeapi.errors import StatusError, bad_request

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

    def __init__(self, log_path: LogPath, tls: ssl.SSLContext | None = None) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner._serve(self)

            def log_message(self, *_args: Any) -> None:
                pass

        self._log_path = log_path
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if tls is not None:
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


def log_container(pod: Mapping[str, Any], name: str, container: str) -> str:
    """The container a log request is for, or the API server's 400 saying which to name."""
    spec = pod.get("spec") or {}
    names = [c.get("name", "") for c in spec.get("containers") or []]
    init = [c.get("name", "") for c in spec.get("initContainers") or []]
    if not container:
        if len(names) == 1:
            return names[0]
        message = f"a container name must be specified for pod {name}, choose one of: "
        message += f"[{' '.join(names)}]"
        if init:
            message += f" or one of the init containers: [{' '.join(init)}]"
        raise bad_request(message)
    if container not in names and container not in init:
        raise bad_request(f"container {container} is not valid for pod {name}")
    return container


def kubelet_address(node: Mapping[str, Any] | None) -> tuple[str, int] | None:
    status = (node or {}).get("status") or {}
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    address = next(
        (a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"),
        None,
    )
    return (address, int(port)) if address and port else None


async def fetch_log(
    node: Mapping[str, Any] | None, namespace: str, pod: str, container: str, query: str
) -> bytes:
    """The kubelet's answer, as the API server passes it on (its errors become a 400 Status)."""
    address = kubelet_address(node)
    if address is None:
        raise StatusError(
            500, "InternalError", f"no kubelet endpoint is known for the node of pod {pod}"
        )
    quoted = "/".join(urllib.parse.quote(p, safe="") for p in (namespace, pod, container))
    url = f"http://{address[0]}:{address[1]}/containerLogs/{quoted}"
    if query:
        url += f"?{query}"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        body = await response.read()
        if response.status != 200:
            raise bad_request(body.decode(errors="replace").strip())
        return body

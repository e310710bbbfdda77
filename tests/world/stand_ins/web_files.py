"""A web server for loader tests: HTTPS with a certificate from a private CA (which the loader is
told to trust, as a cluster's trusted_ca_config_map does), serving a directory with the index
pages rclone's http backend lists; it can answer chosen paths with an error status a number of
times (throttling, an outage) before serving them."""

from __future__ import annotations

import http.server
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tests.world.stand_ins.tls_server import start_https


@dataclass
class Fault:
    status: int
    times: int  # how many requests get it; -1: all of them
    headers: dict[str, str] = field(default_factory=dict)


class WebFiles:
    def __init__(self, tls: bool = True, host: str = "127.0.0.1") -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="web-files-")
        self.root = Path(self._dir.name) / "site"
        self.root.mkdir()
        self.faults: dict[str, Fault] = {}  # path prefix -> fault
        self.requests: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self) -> None:
                if not server._fault(self):
                    super().do_GET()

            def do_HEAD(self) -> None:
                if not server._fault(self):
                    super().do_HEAD()

            def log_message(self, *_args: Any) -> None:
                pass

        handler = partial(Handler, directory=str(self.root))
        self.ca_path = Path(self._dir.name) / "ca.crt"
        scheme = "http"
        if tls:
            tls_server, ca_pem = start_https("files", handler, host)
            self._server: http.server.ThreadingHTTPServer = tls_server
            self.ca_path.write_bytes(ca_pem)
            scheme = "https"
        else:
            self._server = http.server.ThreadingHTTPServer((host, 0), handler)
            self._server.daemon_threads = True
            threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.base = f"{scheme}://{host}:{self._server.server_address[1]}"

    def _fault(self, handler: http.server.BaseHTTPRequestHandler) -> bool:
        """Answer with a planned error instead of the file, if one is due; True when it did."""
        with self._lock:
            self.requests.append(handler.path)
            fault = next((f for p, f in self.faults.items() if handler.path.startswith(p)), None)
            if fault is None or fault.times == 0:
                return False
            if fault.times > 0:
                fault.times -= 1
        handler.send_response(fault.status)
        for name, value in fault.headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return True

    def put(self, files: Mapping[str, bytes], prefix: str = "") -> None:
        for name, data in files.items():
            path = self.root / prefix / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

    def fail(self, path: str, status: int, times: int = -1, **headers: str) -> None:
        """Answer requests for paths under `path` with `status`, `times` times (-1: always)."""
        self.faults[path] = Fault(
            status, times, {k.replace("_", "-"): v for k, v in headers.items()}
        )

    def url(self, path: str) -> str:
        return f"{self.base}/{path}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._dir.cleanup()


@contextmanager
def web_files(tls: bool = True, host: str = "127.0.0.1") -> Iterator[WebFiles]:
    """`host`: 127.0.0.1, or the pod network's address for loaders on the real node."""
    server = WebFiles(tls, host)
    try:
        yield server
    finally:
        server.stop()

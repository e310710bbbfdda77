"""A web server whose answer stops: HTTPS (a private CA) serving one file of `size` bytes, the
first `first` at once, then `step` bytes every `pause` seconds, or (step 0) nothing more while the
connection stays open: what a stalled download looks like to a client. For the loaders' stall
watchdog, with real rclone."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler

from tests.world.stand_ins.tls_server import start_https


class Trickle:
    """An HTTPS file server: `first` bytes at once, then `step` bytes every `pause` seconds
    (never, with step 0) until `size`; `release` lets a stalled answer end."""

    def __init__(
        self, size: int, first: int, step: int = 0, pause: float = 0.0, host: str = "127.0.0.1"
    ) -> None:
        self.size, self.first, self.step, self.pause = size, first, step, pause
        self.release = threading.Event()
        trickle = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: object) -> None:
                pass

            def _head(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(trickle.size))
                self.send_header("Content-Type", "application/octet-stream")
                self.end_headers()

            def do_HEAD(self) -> None:
                self._head()

            def do_GET(self) -> None:
                self._head()
                sent = min(trickle.first, trickle.size)
                self.wfile.write(b"w" * sent)
                self.wfile.flush()
                while sent < trickle.size:
                    if trickle.step == 0 or trickle.release.wait(trickle.pause):
                        trickle.release.wait()  # stalled: hold the connection open
                        return
                    chunk = min(trickle.step, trickle.size - sent)
                    self.wfile.write(b"w" * chunk)
                    self.wfile.flush()
                    sent += chunk

        self.host = host
        self.server, self.ca = start_https("trickle", Handler, host)

    def url(self, name: str) -> str:
        return f"https://{self.host}:{self.server.server_address[1]}/{name}"

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()

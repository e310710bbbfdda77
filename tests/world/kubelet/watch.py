"""A list-then-watch loop over the official client that another thread can stop at once.

The client's own ``Watch`` only notices ``stop()`` when the next event arrives; here ``stop``
shuts the streaming response down, which wakes the blocked read immediately.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

Handler = Callable[[str, dict[str, Any]], None]
RETRY_BACKOFF_SECONDS = 0.2


class Watcher:
    """Calls ``handler(event_type, object)`` for the listed objects, then for each change."""

    def __init__(self, list_call: Callable[..., Any], handler: Handler, name: str) -> None:
        self._list_call = list_call
        self._handler = handler
        self._stopping = threading.Event()
        self._response: Any = None
        self._lock = threading.Lock()
        self.synced = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kubelet-watch-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # already closed is fine
                response.shutdown()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._list_and_watch()
            except Exception:  # reconnect unless stopping
                if self._stopping.wait(RETRY_BACKOFF_SECONDS):
                    return

    def _list_and_watch(self) -> None:
        listing = self._list_call(_preload_content=False)
        body = json.loads(listing.data)
        version = body["metadata"]["resourceVersion"]
        for item in body.get("items") or []:
            self._handler("ADDED", item)
        self.synced.set()
        response = self._list_call(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            _preload_content=False,
        )
        with self._lock:
            self._response = response
        if self._stopping.is_set():
            response.shutdown()
            return
        try:
            for line in iter_resp_lines(response):
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                if kind != "BOOKMARK":
                    self._handler(kind, obj)
        finally:
            with self._lock:
                self._response = None
            response.release_conn()

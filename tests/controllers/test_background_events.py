"""Events are sent in the background: a reconcile never waits for one, and a clean stop sends
the ones still queued."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes.client import ApiClient

from controllers.dataset.writes import ApiWriter

REF = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "ml", "name": "d"}


class HeldRequests:
    """Stands in for RawWriter: each request waits until the test lets it through."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.sent: list[tuple[str, str, str]] = []

    async def request(self, method: str, path: str, body: Any, content_type: str = "") -> bytes:
        await asyncio.wait_for(self.go.wait(), 30)
        self.sent.append((method, path, body["reason"]))
        return b"{}"

    async def close(self) -> None:
        pass


def test_an_event_is_sent_without_the_caller_waiting_and_drained_on_stop() -> None:
    async def run() -> None:
        writer = ApiWriter(ApiClient(), "test", threads=1)
        held = HeldRequests()
        writer.raw = held  # type: ignore[assignment]
        try:
            await writer.event(REF, "Normal", "LoadStarted", "loading")
            await writer.event(REF, "Normal", "LoadSucceeded", "loaded")
            assert held.sent == []  # both returned while their requests were held
            held.go.set()
            await writer.drain()
            assert sorted(reason for _, _, reason in held.sent) == ["LoadStarted", "LoadSucceeded"]
            assert {path for _, path, _ in held.sent} == {"/api/v1/namespaces/ml/events"}
        finally:
            held.go.set()
            await writer.close()

    asyncio.run(run())

"""Events are sent in the background: a reconcile never waits for one, and a clean stop sends
the ones still queued."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kubernetes.client import ApiClient

from controllers.writes.dataset import ApiWriter

REF = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "ml", "name": "d"}


class HeldRequests:
    """Stands in for RawWriter: each request waits until the test lets it through."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.sent: list[tuple[str, str, str]] = []
        self.names: list[str] = []

    async def request(self, method: str, path: str, body: Any, content_type: str = "") -> bytes:
        await asyncio.wait_for(self.go.wait(), 30)
        self.sent.append((method, path, body["reason"]))
        self.names.append(body["metadata"]["name"])
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


def test_events_are_named_as_client_go_names_them_and_never_twice(monkeypatch: Any) -> None:
    """`<object>.<UnixNano in hex>` (client-go's recorder), unique even within one clock tick."""

    async def run() -> None:
        writer = ApiWriter(ApiClient(), "test", threads=1)
        held = HeldRequests()
        held.go.set()
        writer.raw = held  # type: ignore[assignment]
        monkeypatch.setattr(time, "time_ns", lambda: 0x187A0B1C2D3E4F50)  # a coarse clock
        try:
            for _ in range(3):
                await writer.event(REF, "Normal", "LoadStarted", "loading")
            await writer.drain()
        finally:
            await writer.close()
        stamps = ["187a0b1c2d3e4f50", "187a0b1c2d3e4f51", "187a0b1c2d3e4f52"]
        assert sorted(held.names) == [f"d.{stamp}" for stamp in stamps]

    asyncio.run(run())

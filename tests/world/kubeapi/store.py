"""Object storage with one global resourceVersion counter, a bounded event history and watchers."""

from __future__ import annotations

import asyncio
import copy
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import StatusError

Obj = dict[str, Any]


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    key: str
    obj: Obj
    old: Obj | None


def too_old(requested: int, oldest: int) -> StatusError:
    return StatusError(410, "Expired", f"too old resource version: {requested} ({oldest})")


@dataclass(eq=False)
class Watcher:
    key: str
    namespace: str | None
    match: Callable[[Obj], bool]
    queue: asyncio.Queue[tuple[str, Obj] | None] = field(default_factory=asyncio.Queue)

    def translate(self, event: Event) -> tuple[str, Obj] | None:
        """The event this watcher sees, with selector transitions as the watch cache sends them."""
        if event.key != self.key:
            return None
        if self.namespace and event.obj["metadata"].get("namespace") != self.namespace:
            return None
        now = self.match(event.obj)
        if event.type == "MODIFIED":
            before = event.old is not None and self.match(event.old)
            if now and before:
                return ("MODIFIED", event.obj)
            if now:
                return ("ADDED", event.obj)
            if before:
                return ("DELETED", event.obj)
            return None
        return (event.type, event.obj) if now else None

    def offer(self, event: Event) -> None:
        seen = self.translate(event)
        if seen is not None:
            self.queue.put_nowait(seen)

    def close(self) -> None:
        self.queue.put_nowait(None)


class Store:
    def __init__(self, history_size: int = 1000) -> None:
        self.rv = 0
        self.buckets: dict[str, dict[tuple[str, str], Obj]] = {}
        self.history: deque[Event] = deque()
        self.history_size = history_size
        # Events with rv <= compacted_rv are gone from the history.
        self.compacted_rv = 0
        self.watchers: set[Watcher] = set()

    # ------------------------------------------------------------------ reads
    def get(self, key: str, namespace: str, name: str) -> Obj | None:
        obj = self.buckets.get(key, {}).get((namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def list(self, key: str, namespace: str | None = None) -> list[Obj]:
        bucket = self.buckets.get(key, {})
        return [
            copy.deepcopy(bucket[k])
            for k in sorted(bucket)
            if namespace is None or k[0] == namespace
        ]

    def all_objects(self) -> list[tuple[str, Obj]]:
        return [(key, obj) for key, bucket in self.buckets.items() for obj in bucket.values()]

    # ------------------------------------------------------------------ writes
    def _record(self, event: Event) -> None:
        self.history.append(event)
        while len(self.history) > self.history_size:
            self.compacted_rv = self.history.popleft().rv
        for watcher in list(self.watchers):
            watcher.offer(event)

    def put(self, key: str, obj: Obj, old: Obj | None) -> Obj:
        """Store ``obj`` (created when ``old`` is None) under a new resourceVersion."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        meta = obj["metadata"]
        self.buckets.setdefault(key, {})[(meta.get("namespace", ""), meta["name"])] = obj
        stored = copy.deepcopy(obj)
        self._record(Event(self.rv, "ADDED" if old is None else "MODIFIED", key, stored, old))
        return copy.deepcopy(obj)

    def remove(self, key: str, obj: Obj) -> Obj:
        meta = obj["metadata"]
        self.buckets.get(key, {}).pop((meta.get("namespace", ""), meta["name"]), None)
        self.rv += 1
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = str(self.rv)
        self._record(Event(self.rv, "DELETED", key, gone, None))
        return copy.deepcopy(gone)

    # ------------------------------------------------------------------ watch
    def events_since(self, rv: int) -> list[Event]:
        if rv < self.compacted_rv:
            raise too_old(rv, self.compacted_rv + 1)
        return [e for e in self.history if e.rv > rv]

    def compact(self) -> None:
        """Drop the whole event history (like an etcd compaction plus a watch cache restart)."""
        self.history.clear()
        self.compacted_rv = self.rv

    def drop_watchers(self) -> None:
        for watcher in list(self.watchers):
            watcher.close()
        self.watchers.clear()

"""A list+watch cache of one kind of object, shaped like client-go's reflector and store.

One daemon thread per informer lists the objects (in pages), then watches from the list's
resourceVersion. Only what `transform` returns is kept: small records, never whole objects, so a
cache of 10,000 PVCs stays small and a Secret's values are dropped as soon as they are parsed.
Responses are read raw (`_preload_content=False`) and parsed with `json`: the client's model
deserialisation is far too slow and memory hungry for large lists.

Failure handling, as the API server expects of a well-behaved client:
- watch resumes from the last resourceVersion seen (events and BOOKMARKs both advance it);
- 410 Gone (an ERROR event with code 410, or HTTP 410 from list/watch) means the history we need is
  gone: relist and replace the store, emitting ADDED/MODIFIED/DELETED for what changed meanwhile;
- connection errors, 5xx and 429 retry with jittered exponential backoff, honouring Retry-After.

Thread safety: only the informer thread writes the store, and only with single-key assignment,
single-key `pop`, or by swapping in a whole new dict after a relist. Under the GIL each of those is
atomic, as are the readers' `dict.get` and `dict.copy` (C code that runs no Python code for `str`
keys, so no thread switch can happen halfway). Readers on the event loop therefore never take a lock
and never see a half-applied change; `values()` returns a snapshot. Handlers run on the informer
thread with no lock held, after the store has been updated.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import threading
import time
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypedDict, TypeVar

import msgspec
import urllib3
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from gpu_admission.process.reachability import API_SERVER, Reachability, unreachable_reason

log = logging.getLogger(__name__)

T = TypeVar("T")

# A watch that ends this quickly without delivering anything counts as a failure (backoff), so a
# server that keeps closing watches at once cannot make the informer spin.
_MIN_HEALTHY_WATCH_SECONDS = 1.0
# Lists and watch events decoded in C, to plain dicts and lists as json.loads gives them.
_decode = msgspec.json.Decoder().decode
# What a watch ERROR event's object (a metav1.Status) is read for, whatever the shape.
_STATUS_FIELDS = {"code": Any, "reason": Any, "message": Any}


def shaped_decoders(shape: Any) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """Decoders of a list answer and of a watch event whose objects are read only for the
    fields of `shape` (a TypedDict: nested TypedDicts for the objects inside, `Any` for what is
    kept whole). Everything else of each object (a Job's pod template, every managedFields
    entry) is skipped by the decoder, never made into Python objects: a loader Job's watch
    event decoded whole cost its informer more than the rest of its handling. The results are
    plain dicts, as `transform` expects."""
    if shape is None:
        return _decode, _decode
    # The functional form: these types are made at run time, and the class form's annotations
    # would be strings naming this function's locals, which nothing could resolve.
    make: Any = TypedDict
    fields = {**typing.get_type_hints(shape), **_STATUS_FIELDS}
    item = make(f"{shape.__name__}Read", fields, total=False)
    event = make("WatchEvent", {"type": Any, "object": item}, total=False)
    listed = make("List", {"metadata": Any, "items": list[item] | None}, total=False)
    return msgspec.json.Decoder(listed).decode, msgspec.json.Decoder(event).decode


class EventType(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


Handler = Callable[[EventType, Any, Any], None]
"""handler(event_type, old, new): old is None for ADDED, new is None for DELETED."""


def object_key(namespace: str | None, name: str) -> str:
    """The store key: `namespace/name`, or `name` for cluster-scoped objects (as client-go)."""
    return f"{namespace}/{name}" if namespace else name


def meta_namespace_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return object_key(meta.get("namespace"), meta.get("name", ""))


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with jitter: initial * factor**attempt, capped, then up to +jitter."""

    initial: float = 0.5
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 0.2

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        base = min(self.maximum, self.initial * self.factor ** min(attempt, 64))
        return min(self.maximum, base * (1.0 + self.jitter * rand()))


def retry_after_seconds(error: BaseException) -> float | None:
    """The Retry-After of a 429/5xx answer, in seconds (the API server sends whole seconds)."""
    if not isinstance(error, ApiException) or not error.headers:
        return None
    value = error.headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def retry_delay(error: BaseException, attempt: int, backoff: Backoff) -> float:
    """How long to wait before retrying after `error`: Retry-After wins, else the backoff."""
    after = retry_after_seconds(error)
    if after is not None:
        return min(after, backoff.maximum)
    return backoff.delay(attempt)


def describe_error(error: BaseException) -> str:
    """A short, value-free description (API error bodies are Status objects, never secrets)."""
    if isinstance(error, ApiException):
        message = ""
        with contextlib.suppress(ValueError, AttributeError):
            message = json.loads(error.body or "{}").get("message", "")
        return f"HTTP {error.status} {error.reason or ''}".rstrip() + (
            f": {message}" if message else ""
        )
    return f"{type(error).__name__}: {error}"


DEFAULT_BACKOFF = Backoff()


class _Expired(Exception):
    """The resourceVersion we watch from is older than the server's history: relist."""


class WatchError(Exception):
    """The server ended a watch with an ERROR event other than 410."""


def _resolve_waiter(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


class Informer(Generic[T]):
    """A list+watch cache of the objects one `list_call` returns, kept as `transform(obj)`."""

    def __init__(
        self,
        name: str,
        list_call: Callable[..., Any],
        *,
        transform: Callable[[dict[str, Any]], T | None],
        field_selector: str | None = None,
        label_selector: str | None = None,
        namespace: str | None = None,
        key: Callable[[dict[str, Any]], str] = meta_namespace_key,
        handlers: Iterable[Handler] = (),
        page_size: int = 500,
        watch_timeout_seconds: float = 300.0,
        backoff: Backoff = DEFAULT_BACKOFF,
        request_timeout_seconds: float = 60.0,
        optional: bool = False,
        not_served_recheck_seconds: float = 300.0,
        reachability: Reachability = API_SERVER,
        shape: Any = None,
    ) -> None:
        """`optional`: the API server may not serve this resource at all (an API group that
        older clusters lack). A list answered 404 then counts as synced and empty, is logged
        once, and is tried again every `not_served_recheck_seconds`. `shape`: the fields
        `transform` and `key` read (see `shaped_decoders`); whole objects when None."""
        self.name = name
        self._list_call = list_call
        self._transform = transform
        self._namespace = namespace
        self._selectors: dict[str, str] = {}
        if field_selector:
            self._selectors["field_selector"] = field_selector
        if label_selector:
            self._selectors["label_selector"] = label_selector
        self._key = key
        self._handlers: list[Handler] = list(handlers)
        self._page_size = page_size
        self._watch_timeout = watch_timeout_seconds
        self._backoff = backoff
        self._request_timeout = request_timeout_seconds
        self._optional = optional
        self._recheck = not_served_recheck_seconds
        self._served = True
        self._reachability = reachability
        self._decode_list, self._decode_event = shaped_decoders(shape)

        self._store: dict[str, T] = {}
        self.changes = 0  # counts every change of the store; readers only compare it
        self._resource_version: str | None = None
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._last_error: str | None = None
        self._thread: threading.Thread | None = None
        self._response: urllib3.BaseHTTPResponse | None = None
        self._waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]]] = {}
        self._waiters_lock = threading.Lock()

    # Reading (any thread; see the module docstring for why no lock is needed).

    def get(self, key: str) -> T | None:
        return self._store.get(key)

    def values(self) -> list[T]:
        return list(self._store.copy().values())

    def items(self) -> list[tuple[str, T]]:
        return list(self._store.copy().items())

    def __len__(self) -> int:
        return len(self._store)

    def __contains__(self, key: object) -> bool:
        return key in self._store

    @property
    def synced(self) -> bool:
        """True once the first full list has been stored (stays true across relists)."""
        return self._synced.is_set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Block until synced or `timeout` seconds pass; returns `synced`."""
        return self._synced.wait(timeout)

    @property
    def last_sync_error(self) -> str | None:
        """The latest list/watch failure, cleared by the next success; for readiness reports."""
        return self._last_error

    @property
    def served(self) -> bool:
        """False while the API server answers that it does not serve this resource (optional
        informers only); nothing of it exists then, so there is nothing to look up."""
        return self._served

    @property
    def resource_version(self) -> str | None:
        return self._resource_version

    def add_handler(self, handler: Handler) -> None:
        """Add an event handler; add before start() to hear the initial ADDED events."""
        self._handlers.append(handler)

    async def wait_for(self, key: str, timeout: float) -> T | None:
        """The object under `key`, waiting up to `timeout` seconds for it to arrive."""
        value = self._store.get(key)
        if value is not None or timeout <= 0:
            return value
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        entry = (loop, future)
        with self._waiters_lock:
            self._waiters.setdefault(key, []).append(entry)
        try:
            # The informer stores before it notifies: an arrival between our first look and
            # registering is seen here, one after registering resolves the future.
            value = self._store.get(key)
            if value is not None:
                return value
            try:
                return await asyncio.wait_for(future, timeout)
            except TimeoutError:
                return self._store.get(key)
        finally:
            with self._waiters_lock:
                entries = self._waiters.get(key)
                if entries is not None and entry in entries:
                    entries.remove(entry)
                    if not entries:
                        del self._waiters[key]

    # Lifecycle.

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"informer {self.name} was already started")
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end; an open list/watch response is shut down so it ends promptly."""
        self._stop.set()
        response = self._response
        if response is not None:
            _shutdown(response)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end after stop(); returns True if it has."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # The informer thread.

    def _run(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            try:
                if self._resource_version is None:
                    self._list()
                    attempt = 0
                if self._stop.is_set():
                    break
                if self._watch():
                    attempt = 0
                    continue
                error: BaseException = WatchError("the watch ended at once without any event")
            except _Expired:
                # Routine: after an API server restart every watch resumes from a version
                # its new watch cache no longer holds. DEBUG, as client-go's reflector has it.
                log.debug("informer %s: resourceVersion expired, relisting", self.name)
                self._resource_version = None
                continue
            except ApiException as exc:
                if exc.status == 410:  # list continue token or watch RV too old
                    self._resource_version = None
                    continue
                if exc.status == 404 and self._optional:
                    if self._resource_version is not None:  # a watch: list to be sure
                        self._resource_version = None
                        continue
                    self._not_served()
                    self._stop.wait(self._recheck)
                    continue
                error = exc
            except Exception as exc:
                error = exc
            if self._stop.is_set():
                break
            delay = retry_delay(error, attempt, self._backoff)
            attempt += 1
            self._last_error = describe_error(error)
            unreachable = unreachable_reason(error)
            if unreachable is not None:  # said once for the whole process, not per informer
                self._reachability.lost(self, unreachable, f"informer {self.name}")
            else:
                log.warning(
                    "informer %s: %s; retrying in %.1fs", self.name, self._last_error, delay
                )
            self._stop.wait(delay)
        self._reachability.forget(self)

    def _not_served(self) -> None:
        if self._served:
            log.info(
                "informer %s: the API server does not serve this resource; treating it as "
                "empty and asking again every %.0fs",
                self.name,
                self._recheck,
            )
        self._served = False
        self._replace({}, "")
        self._resource_version = None  # list again next time

    def _call(self, **kwargs: Any) -> urllib3.BaseHTTPResponse:
        kwargs.update(self._selectors)
        kwargs["_preload_content"] = False
        if self._namespace is not None:
            response = self._list_call(self._namespace, **kwargs)
        else:
            response = self._list_call(**kwargs)
        self._reachability.answered(self)
        self._response = response
        if self._stop.is_set():  # stop() ran before the response was visible to it
            _shutdown(response)
        return response

    def _release(self, response: urllib3.BaseHTTPResponse, clean: bool) -> None:
        self._response = None
        if not clean:
            response.close()
        response.release_conn()

    def _list(self) -> None:
        fresh: dict[str, T] = {}
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": self._page_size}
            if token:
                kwargs["_continue"] = token
            response = self._call(**kwargs, _request_timeout=(10.0, self._request_timeout))
            clean = False
            try:
                body = self._decode_list(response.data)
                clean = True
            finally:
                self._release(response, clean)
            for obj in body.get("items") or ():
                value = self._safe_transform(obj)
                if value is not None:
                    fresh[self._key(obj)] = value
            meta = body.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                self._served = True
                self._replace(fresh, meta.get("resourceVersion") or "")
                return
            if self._stop.is_set():
                return

    def _watch(self) -> bool:
        """Watch until the server ends the stream; False if it ended at once with nothing."""
        timeout = max(1, int(self._watch_timeout * (1.0 + random.random())))
        started = time.monotonic()
        response = self._call(
            watch=True,
            resource_version=self._resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout,
            _request_timeout=(10.0, timeout + 30.0),
        )
        delivered = False
        clean = False
        try:
            for line in iter_resp_lines(response):
                if self._stop.is_set():
                    return True
                if line:
                    self._handle(self._decode_event(line))
                    delivered = True
            clean = True
        finally:
            self._release(response, clean)
        return delivered or time.monotonic() - started >= _MIN_HEALTHY_WATCH_SECONDS

    def _handle(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Expired(obj.get("message", "resourceVersion expired"))
            raise WatchError(f"{obj.get('code')} {obj.get('reason')}: {obj.get('message')}")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED"):
            self._apply(self._key(obj), self._safe_transform(obj))
        elif kind == "DELETED":
            self._apply(self._key(obj), None)
        elif kind != "BOOKMARK":
            log.warning("informer %s: ignoring watch event of type %r", self.name, kind)
        if version:
            self._resource_version = version
        self._last_error = None

    def _safe_transform(self, obj: dict[str, Any]) -> T | None:
        try:
            return self._transform(obj)
        except Exception:
            log.exception("informer %s: cannot convert %s; dropped", self.name, self._key(obj))
            return None

    # Store changes (informer thread only).

    def _apply(self, key: str, value: T | None) -> None:
        old = self._store.get(key)
        if value is None:
            if old is None:
                return
            self._store.pop(key, None)
            self.changes += 1
            self._dispatch(EventType.DELETED, old, None)
            return
        if value != old:
            self.changes += 1
        self._store[key] = value
        self._notify_waiters([key])
        if old is None:
            self._dispatch(EventType.ADDED, None, value)
        elif old != value:
            self._dispatch(EventType.MODIFIED, old, value)

    def _replace(self, fresh: dict[str, T], resource_version: str) -> None:
        old = self._store
        self._store = fresh  # one reference swap: readers see the old or the new store, whole
        if fresh != old:
            self.changes += 1
        self._resource_version = resource_version
        self._last_error = None
        self._synced.set()
        self._notify_waiters(fresh)
        for key, value in fresh.items():
            before = old.get(key)
            if before is None:
                self._dispatch(EventType.ADDED, None, value)
            elif before != value:
                self._dispatch(EventType.MODIFIED, before, value)
        for key, before in old.items():
            if key not in fresh:
                self._dispatch(EventType.DELETED, before, None)

    def _notify_waiters(self, present: Iterable[str] | dict[str, T]) -> None:
        if not self._waiters:  # racy but safe: see wait_for's second look
            return
        with self._waiters_lock:
            if isinstance(present, dict):
                keys = [key for key in self._waiters if key in present]
            else:
                keys = [key for key in present if key in self._waiters]
            ready = [(key, self._waiters.pop(key)) for key in keys]
        for key, entries in ready:
            value = self._store.get(key)
            for loop, future in entries:
                # RuntimeError: that event loop is closed, so nobody is waiting any more.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_resolve_waiter, future, value)

    def _dispatch(self, kind: EventType, old: T | None, new: T | None) -> None:
        for handler in list(self._handlers):
            try:
                handler(kind, old, new)
            except Exception:
                log.exception("informer %s: %s handler failed", self.name, kind)


def _shutdown(response: urllib3.BaseHTTPResponse) -> None:
    """Unblock a read in another thread: shut the socket down (close alone may not wake it)."""
    try:
        shutdown = getattr(response, "shutdown", None)
        if shutdown is not None:
            shutdown()
        else:
            response.close()
    except Exception:  # already closed: nothing to unblock
        pass

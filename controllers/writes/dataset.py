"""The dataset controller's calls to the Kubernetes API, and what their failures mean.

The writes of every load (Job creates, PVC status patches, Events, gate releases) go out as JSON
bytes on the event loop (`controllers.writes.raw`: no model objects, 429s waited out),
as many at once as reconcile workers are writing. The rarer calls run the generated methods on
the controller's own bounded thread pool (one thread per reconcile worker), each read to its
end (`controllers.writes.raw.write`) so the connection goes back to the pool. A write refused
because its namespace is being deleted raises NamespaceTerminating: that work is dropped, not
retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec
from kubernetes.client import ApiClient, BatchV1Api, CoreV1Api, CustomObjectsApi, StorageV1Api
from kubernetes.client.exceptions import ApiException

from controllers.writes.background import BackgroundWrites
from controllers.writes.raw import JSON, JSON_PATCH, STRATEGIC_MERGE, RawWriter, write
from gpu_admission.cluster.api_errors import namespace_terminating
from gpu_admission.cluster.dataset_snapshots import SNAPSHOT_GROUP, SNAPSHOT_VERSION
from gpu_admission.cluster.events import event_body
from gpu_admission.cluster.informer import describe_error

log = logging.getLogger(__name__)


COMPONENT = "gpu-admission"
EVENT_CONCURRENCY = 2  # Events in flight at once: they never crowd out Job creates
EVENT_DRAIN_SECONDS = 5.0


class NamespaceTerminating(Exception):
    """The namespace is being deleted: nothing can be created in it any more."""

    def __init__(self, namespace: str) -> None:
        super().__init__(f"namespace {namespace} is being deleted")
        self.namespace = namespace


class _Metadata(msgspec.Struct):
    resourceVersion: str = ""


class _Written(msgspec.Struct):
    """What a write's answer is read for: the rest of the object is skipped, not decoded."""

    metadata: _Metadata = msgspec.field(default_factory=_Metadata)


_written = msgspec.json.Decoder(_Written)


def _resource_version(answer: bytes) -> str:
    with contextlib.suppress(msgspec.DecodeError):
        return _written.decode(answer).metadata.resourceVersion
    return ""


@contextlib.contextmanager
def _dropped_if_terminating(namespace: str) -> Iterator[None]:
    """A write refused because its namespace is being deleted raises NamespaceTerminating."""
    try:
        yield
    except ApiException as exc:
        if namespace_terminating(exc):
            raise NamespaceTerminating(namespace) from None
        raise


class ApiWriter:
    def __init__(self, api_client: ApiClient, identity: str, threads: int) -> None:
        self.core = CoreV1Api(api_client)
        self.batch = BatchV1Api(api_client)
        self.custom = CustomObjectsApi(api_client)
        self.storage = StorageV1Api(api_client)
        self.raw = RawWriter(api_client)
        self.identity = identity
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="dataset-api")
        self._events = BackgroundWrites(EVENT_CONCURRENCY)
        self._last_stamp = 0

    def _event_stamp(self) -> int:
        """An Event's name suffix: nanoseconds since the epoch, as client-go's recorder names
        Events (`<object>.<UnixNano in hex>`), never the same twice in this process. A random
        suffix (uuid4) read the kernel's random source for every Event."""
        self._last_stamp = max(time.time_ns(), self._last_stamp + 1)
        return self._last_stamp

    async def drain(self, timeout: float = EVENT_DRAIN_SECONDS) -> None:
        """Wait (a bounded while) for the Events still being sent: a clean stop keeps them."""
        await self._events.drain(timeout)

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._events.cancel()
        await self.raw.close()

    async def _run(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(call, *args, **kwargs))

    async def _write(self, namespace: str, call: Callable[..., Any], *args: Any) -> None:
        with _dropped_if_terminating(namespace):
            await self._run(write, call, *args)

    async def _raw(
        self, namespace: str, method: str, path: str, body: Any, content_type: str = JSON
    ) -> bytes:
        with _dropped_if_terminating(namespace):
            return await self.raw.request(method, path, body, content_type)

    async def create_job(self, namespace: str, body: dict[str, Any]) -> bool:
        """False when the Job exists already (made by an earlier pass: adopt it)."""
        try:
            await self._raw(namespace, "POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def delete_job(self, namespace: str, name: str) -> None:
        body = {"propagationPolicy": "Foreground"}
        try:
            await self._run(write, self.batch.delete_namespaced_job, name, namespace, body=body)
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def patch_pvc_status(self, namespace: str, name: str, body: dict[str, Any]) -> str | None:
        """The resourceVersion the write gave the PVC ("" if the answer lacks one); None when
        the PVC is gone, or is another one under the same name (uid mismatch)."""
        path = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}/status"
        try:
            answer = await self._raw(namespace, "PATCH", path, body, STRATEGIC_MERGE)
        except ApiException as exc:
            if exc.status in (404, 409):
                return None
            raise
        return _resource_version(answer)

    async def patch_pod(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> bool:
        """False when the pod is gone (404) or the patch's test failed (422: stale view)."""
        try:
            path = f"/api/v1/namespaces/{namespace}/pods/{name}"
            await self._raw(namespace, "PATCH", path, ops, JSON_PATCH)
        except ApiException as exc:
            if exc.status in (404, 422):
                return False
            raise
        return True

    async def list_job_pods(self, namespace: str, job: str, label: str) -> list[dict[str, Any]]:
        response = await self._run(
            self.core.list_namespaced_pod,
            namespace,
            label_selector=f"{label}={job}",
            _preload_content=False,
        )
        return json.loads(response.data).get("items") or []  # type: ignore[no-any-return]

    async def pod_events(self, namespace: str, name: str) -> list[tuple[str, str]]:
        """A pod's core/v1 Events as (reason, message), oldest first (the kubelet's FailedMount
        names a volume's missing ConfigMap or Secret only there)."""
        response = await self._run(
            self.core.list_namespaced_event,
            namespace,
            field_selector=f"involvedObject.kind=Pod,involvedObject.name={name}",
            _preload_content=False,
        )
        items = json.loads(response.data).get("items") or []
        items.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        return [(str(e.get("reason") or ""), str(e.get("message") or "")) for e in items]

    async def pod_log_tail(
        self, namespace: str, name: str, container: str, lines: int, limit_bytes: int
    ) -> str | None:
        """The last `lines` lines of a container's log (`pods/log`); None when there is none
        to read yet (not started, or gone)."""
        try:
            response = await self._run(
                self.core.read_namespaced_pod_log,
                name,
                namespace,
                container=container,
                tail_lines=lines,
                limit_bytes=limit_bytes,
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status in (400, 404):
                return None
            raise
        return response.data.decode(errors="replace")  # type: ignore[no-any-return]

    # Volume snapshots (the dataset cache).

    async def create_snapshot(self, namespace: str, body: dict[str, Any]) -> bool:
        """False when it exists already (an earlier pass made it)."""
        call = self.custom.create_namespaced_custom_object
        try:
            await self._write(
                namespace,
                call,
                SNAPSHOT_GROUP,
                SNAPSHOT_VERSION,
                namespace,
                "volumesnapshots",
                body,
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def delete_snapshot(self, namespace: str, name: str) -> None:
        call = self.custom.delete_namespaced_custom_object
        try:
            await self._run(
                write, call, SNAPSHOT_GROUP, SNAPSHOT_VERSION, namespace, "volumesnapshots", name
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def storage_class_provisioner(self, name: str) -> str | None:
        """The StorageClass's provisioner (its CSI driver); None when there is no such class."""
        try:
            response = await self._run(
                self.storage.read_storage_class, name, _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(response.data).get("provisioner")  # type: ignore[no-any-return]

    async def snapshot_classes(self) -> list[dict[str, Any]]:
        response = await self._run(
            self.custom.list_cluster_custom_object,
            SNAPSHOT_GROUP,
            SNAPSHOT_VERSION,
            "volumesnapshotclasses",
            _preload_content=False,
        )
        return json.loads(response.data).get("items") or []  # type: ignore[no-any-return]

    async def event(self, ref: dict[str, str], kind: str, reason: str, message: str) -> None:
        """A core/v1 Event, sent in the background, at most EVENT_CONCURRENCY at once: the
        reconcile does not wait for it, and a burst of Events never queues ahead of Job creates.
        Failing to record one never fails the reconcile."""
        name = f"{ref['name']}.{self._event_stamp():x}"
        body = event_body(ref, kind, reason, message, COMPONENT, self.identity, name=name)
        path = f"/api/v1/namespaces/{ref['namespace']}/events"
        self._events.start(functools.partial(self._post_event, path, body))

    async def _post_event(self, path: str, body: dict[str, Any]) -> None:
        try:
            await self.raw.request("POST", path, body)
        except ApiException as exc:
            ref = body["involvedObject"]
            log.info(
                "no event %s on %s/%s: %s",
                body["reason"],
                ref["namespace"],
                ref["name"],
                describe_error(exc),
            )
        except Exception:  # a connection error: the Event is lost, the load is not
            log.exception("no event %s", body["reason"])

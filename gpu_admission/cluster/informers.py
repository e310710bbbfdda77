"""The running service's ClusterView: informer-fed caches, plus a bounded miss resolver.

Five informers feed it: nodes, credential Secrets (one per credential type, by field selector),
ServiceAccounts and PVCs. Every PVC is watched, not only dataset PVCs: a pod that mounts an
ordinary PVC must not pay a cache miss (a wait plus a GET) on every admission; for a PVC without a
data source the record is only its name. Lookups are dictionary reads: no admission request
waits on the API server. The one exception is `resolve`, which the service edge calls before the
policies run for objects they will look up that are not cached yet (an object created a moment
before the pod): it waits briefly for the informers, then makes ONE GET per object still missing.

Records hold what policies read and nothing more: a Secret's type and key names (never values);
only the annotations under the configured prefix for ServiceAccounts and PVCs (others, such as
kubectl's last-applied-configuration, can be large and no policy reads them).

Objects fetched by GET that the informers will never hold (a Secret of another type) go into a
small side cache with a short TTL, so the policy can tell "wrong type" from "missing" and a burst
of pods naming the same object costs one GET, not one each. The informers win over the side cache.
Lookups and `resolve` run on the event loop thread; the side cache is touched only there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpu_admission.cluster.informer import (
    DEFAULT_BACKOFF,
    Backoff,
    Informer,
    describe_error,
    object_key,
)
from gpu_admission.cluster.view import (
    NodeInfo,
    ObjectRef,
    PVCInfo,
    SecretInfo,
    ServiceAccountInfo,
    node_info,
    pvc_info,
    secret_info,
    service_account_info,
)
from gpu_admission.config import Config
from gpu_admission.names import AWS_CREDENTIAL_TYPE, GCP_CREDENTIAL_TYPE

log = logging.getLogger(__name__)

Record = SecretInfo | ServiceAccountInfo | PVCInfo


class ClusterLookupError(Exception):
    """A cache miss could not be settled: the GET failed. The message says which object and why."""


def _prefixed(annotations: Mapping[str, str], prefix: str) -> dict[str, str]:
    return {k: v for k, v in annotations.items() if k.startswith(prefix)}


def service_account_record(prefix: str) -> Callable[[dict[str, Any]], ServiceAccountInfo]:
    def transform(obj: dict[str, Any]) -> ServiceAccountInfo:
        info = service_account_info(obj)
        return dataclasses.replace(info, annotations=_prefixed(info.annotations, prefix))

    return transform


def pvc_record(prefix: str) -> Callable[[dict[str, Any]], PVCInfo]:
    def transform(obj: dict[str, Any]) -> PVCInfo:
        info = pvc_info(obj)
        return dataclasses.replace(
            info,
            annotations=_prefixed(info.annotations, prefix),
            labels=_prefixed(info.labels, prefix),
        )

    return transform


class _SideCache:
    """GET results by ref, each kept for `ttl` seconds; the oldest go first beyond `max_entries`."""

    def __init__(
        self, ttl: float, max_entries: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl = ttl
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[ObjectRef, tuple[float, Record]] = OrderedDict()

    def get(self, ref: ObjectRef) -> Record | None:
        entry = self._entries.get(ref)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            del self._entries[ref]
            return None
        return entry[1]

    def put(self, ref: ObjectRef, record: Record) -> None:
        self._entries.pop(ref, None)
        self._entries[ref] = (self._clock() + self._ttl, record)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class InformerClusterView:
    """ClusterView + MissResolver over informers; `start()` them, gate readiness on `ready()`."""

    def __init__(
        self,
        api_client: client.ApiClient,
        config: Config,
        *,
        get_timeout_seconds: float = 2.0,
        side_cache_ttl_seconds: float = 5.0,
        side_cache_entries: int = 1024,
        watch_timeout_seconds: float = 300.0,
        backoff: Backoff = DEFAULT_BACKOFF,
        page_size: int = 500,
    ) -> None:
        self._core = client.CoreV1Api(api_client)
        self._wait_seconds = config.credentials.informer_wait_seconds
        self._get_timeout = get_timeout_seconds
        self._side = _SideCache(side_cache_ttl_seconds, side_cache_entries)
        self._inflight: dict[ObjectRef, asyncio.Future[Record | None]] = {}
        prefix = config.annotation_prefix
        self._sa_record = service_account_record(prefix)
        self._pvc_record = pvc_record(prefix)
        options: dict[str, Any] = {
            "watch_timeout_seconds": watch_timeout_seconds,
            "backoff": backoff,
            "page_size": page_size,
        }
        core = self._core
        self._nodes_generation = 0
        self.node_informer: Informer[NodeInfo] = Informer(
            "nodes",
            core.list_node,
            transform=node_info,
            handlers=[self._node_changed],
            **options,
        )
        self.secret_informers: tuple[Informer[SecretInfo], ...] = tuple(
            Informer(
                f"secrets-{secret_type}",
                core.list_secret_for_all_namespaces,
                field_selector=f"type={secret_type}",
                transform=secret_info,
                **options,
            )
            for secret_type in (GCP_CREDENTIAL_TYPE, AWS_CREDENTIAL_TYPE)
        )
        self.service_account_informer: Informer[ServiceAccountInfo] = Informer(
            "serviceaccounts",
            core.list_service_account_for_all_namespaces,
            transform=self._sa_record,
            **options,
        )
        self.pvc_informer: Informer[PVCInfo] = Informer(
            "persistentvolumeclaims",
            core.list_persistent_volume_claim_for_all_namespaces,
            transform=self._pvc_record,
            **options,
        )

    @property
    def informers(self) -> tuple[Informer[Any], ...]:
        return (
            self.node_informer,
            *self.secret_informers,
            self.service_account_informer,
            self.pvc_informer,
        )

    # Lifecycle and readiness.

    def start(self) -> None:
        for informer in self.informers:
            informer.start()

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()

    def join(self, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        return all(i.join(max(0.0, deadline - time.monotonic())) for i in self.informers)

    def ready(self) -> list[str]:
        """Names of informers that have not finished their first list, with the latest error."""
        waiting = []
        for informer in self.informers:
            if not informer.synced:
                error = informer.last_sync_error
                waiting.append(f"informer {informer.name}" + (f" ({error})" if error else ""))
        return waiting

    # ClusterView.

    def nodes(self) -> Iterable[NodeInfo]:
        return self.node_informer.values()

    def nodes_generation(self) -> int:
        return self._nodes_generation

    def _node_changed(self, event: Any, old: NodeInfo | None, new: NodeInfo | None) -> None:
        # Called on the informer thread, the only writer; readers only compare the number.
        self._nodes_generation += 1

    def node(self, name: str) -> NodeInfo | None:
        return self.node_informer.get(name)

    def secret(self, namespace: str, name: str) -> SecretInfo | None:
        key = object_key(namespace, name)
        for informer in self.secret_informers:
            found = informer.get(key)
            if found is not None:
                return found
        side = self._side.get(ObjectRef("Secret", namespace, name))
        return side if isinstance(side, SecretInfo) else None

    def service_account(self, namespace: str, name: str) -> ServiceAccountInfo | None:
        found = self.service_account_informer.get(object_key(namespace, name))
        if found is not None:
            return found
        side = self._side.get(ObjectRef("ServiceAccount", namespace, name))
        return side if isinstance(side, ServiceAccountInfo) else None

    def pvc(self, namespace: str, name: str) -> PVCInfo | None:
        found = self.pvc_informer.get(object_key(namespace, name))
        if found is not None:
            return found
        side = self._side.get(ObjectRef("PersistentVolumeClaim", namespace, name))
        return side if isinstance(side, PVCInfo) else None

    def lookup(self, ref: ObjectRef) -> Record | None:
        if ref.kind == "Secret":
            return self.secret(ref.namespace, ref.name)
        if ref.kind == "ServiceAccount":
            return self.service_account(ref.namespace, ref.name)
        return self.pvc(ref.namespace, ref.name)

    # MissResolver.

    async def resolve(self, refs: Iterable[ObjectRef]) -> None:
        """Settle every ref not cached: a bounded wait for the informers, then one GET each.

        Afterwards each ref is either in the view or known not to exist (404). Raises
        ClusterLookupError when a GET fails, so the request is not judged on a guess.
        """
        missing = list(dict.fromkeys(ref for ref in refs if self.lookup(ref) is None))
        if not missing:
            return
        if self._wait_seconds > 0:
            found = await asyncio.gather(*(self._wait_informer(ref) for ref in missing))
            missing = [ref for ref, value in zip(missing, found, strict=True) if value is None]
        if not missing:
            return
        results = await asyncio.gather(
            *(self._fetch_once(ref) for ref in missing), return_exceptions=True
        )
        failures = []
        for ref, result in zip(missing, results, strict=True):
            if isinstance(result, BaseException):
                failures.append(f"{ref.kind} {ref.namespace}/{ref.name}: {describe_error(result)}")
        if failures:
            raise ClusterLookupError(
                "could not look up "
                + "; ".join(failures)
                + ". The object is not in the cache yet and the Kubernetes API did not answer; "
                "retry in a moment"
            )

    async def _wait_informer(self, ref: ObjectRef) -> Record | None:
        key = object_key(ref.namespace, ref.name)
        if ref.kind == "ServiceAccount":
            return await self.service_account_informer.wait_for(key, self._wait_seconds)
        if ref.kind == "PersistentVolumeClaim":
            return await self.pvc_informer.wait_for(key, self._wait_seconds)
        # A Secret may arrive through either type's informer: take the first that has it.
        waits = [
            asyncio.ensure_future(i.wait_for(key, self._wait_seconds))
            for i in self.secret_informers
        ]
        try:
            for arrival in asyncio.as_completed(waits):
                value = await arrival
                if value is not None:
                    return value
            return None
        finally:
            for wait in waits:
                wait.cancel()

    async def _fetch_once(self, ref: ObjectRef) -> Record | None:
        """One GET per ref, shared by concurrent requests missing the same object."""
        pending = self._inflight.get(ref)
        if pending is None:
            pending = asyncio.ensure_future(asyncio.to_thread(self._get, ref))
            self._inflight[ref] = pending

            def forget(_done: asyncio.Future[Record | None], ref: ObjectRef = ref) -> None:
                self._inflight.pop(ref, None)

            pending.add_done_callback(forget)
        record = await asyncio.shield(pending)
        if record is not None:
            self._side.put(ref, record)
        return record

    def _get(self, ref: ObjectRef) -> Record | None:
        """GET one object (worker thread); None when it does not exist."""
        read: Callable[..., Any]
        transform: Callable[[dict[str, Any]], Record]
        if ref.kind == "Secret":
            read = self._core.read_namespaced_secret
            transform = secret_info
        elif ref.kind == "ServiceAccount":
            read = self._core.read_namespaced_service_account
            transform = self._sa_record
        else:
            read = self._core.read_namespaced_persistent_volume_claim
            transform = self._pvc_record
        try:
            # Raw response: the client's model types cannot express _preload_content=False.
            response = cast(
                urllib3.BaseHTTPResponse,
                read(
                    ref.name,
                    ref.namespace,
                    _preload_content=False,
                    _request_timeout=(self._get_timeout, self._get_timeout),
                ),
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        try:
            # Parsed and reduced at once: a Secret's values live only inside this call.
            return transform(json.loads(response.data))
        finally:
            response.release_conn()

"""The running service's ClusterView: informer-fed caches, plus a bounded miss resolver.

Informers feed it: nodes, credential Secrets (one per credential type, by field selector),
ServiceAccounts, PVCs, and the Dynamic Resource Allocation kinds (ResourceClaims,
ResourceClaimTemplates, DeviceClasses; optional, since clusters before 1.34 may not serve
resource.k8s.io/v1: there they count as empty and nothing of them is ever fetched), and the
dataset cache's VolumeSnapshots (label-selected; optional too: clusters without the snapshot
CRDs simply have no cache).

Every PVC is watched, not only dataset PVCs: a pod that mounts an ordinary PVC must not pay a
cache miss (a wait plus a GET) on every admission; for a PVC without a data source the record is
only its name. Lookups are dictionary reads: no admission request
waits on the API server. The one exception is `resolve`, which the service edge calls before the
policies run for objects they will look up that are not cached yet (an object created a moment
before the pod): it waits briefly for the informers, then makes ONE GET per object still missing.

Records hold what policies read and nothing more: a Secret's type and key names (never values);
only the annotations under the configured prefix for ServiceAccounts and PVCs (others, such as
kubectl's last-applied-configuration, can be large and no policy reads them).

Objects fetched by GET that the informers will never hold (a Secret of another type) go into a
small side cache (`SideCache`) with a short TTL, so the policy can tell "wrong type" from
"missing". The informers win over the side cache. Lookups and `resolve` run on the event loop
thread; the side cache is touched only there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpu_admission.cluster.dataset_snapshots import SnapshotInfo, snapshot_informer
from gpu_admission.cluster.dra import (
    ClaimInfo,
    DeviceClassInfo,
    device_class_info,
    resource_claim_info,
    resource_claim_template_info,
)
from gpu_admission.cluster.informer import (
    DEFAULT_BACKOFF,
    Backoff,
    Informer,
    describe_error,
    object_key,
)
from gpu_admission.cluster.side_cache import SideCache
from gpu_admission.cluster.view import (
    NodeInfo,
    ObjectRef,
    PVCInfo,
    RefKind,
    SecretInfo,
    ServiceAccountInfo,
    node_info,
    pvc_record,
    secret_info,
    service_account_record,
)
from gpu_admission.config.model import Config
from gpu_admission.names import CREDENTIAL_TYPES

log = logging.getLogger(__name__)

Record = SecretInfo | ServiceAccountInfo | PVCInfo | ClaimInfo | DeviceClassInfo


class ClusterLookupError(Exception):
    """A cache miss could not be settled: the GET failed. The message says which object and why."""


@dataclasses.dataclass(frozen=True)
class _Source:
    """Where records of one lookup kind come from: the informers that hold them (a Secret may
    be in either credential type's), the GET for a miss, and what a record of it looks like."""

    informers: tuple[Informer[Any], ...]
    read: Callable[..., Any]
    transform: Callable[[dict[str, Any]], Record]
    record_type: type

    @property
    def served(self) -> bool:
        return any(i.served for i in self.informers)


class LiveClusterView:
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
        core = client.CoreV1Api(api_client)
        dra = client.ResourceV1Api(api_client)
        self._wait_seconds = config.credentials.informer_wait_seconds
        self._get_timeout = get_timeout_seconds
        self._side: SideCache[ObjectRef, Record] = SideCache(
            side_cache_ttl_seconds, side_cache_entries
        )
        self._side_ttl = side_cache_ttl_seconds
        self._inflight: dict[ObjectRef, asyncio.Future[Record | None]] = {}
        prefix = config.annotation_prefix
        sa_record = service_account_record(prefix)
        pvc_record_of = pvc_record(prefix)
        options: dict[str, Any] = {
            "watch_timeout_seconds": watch_timeout_seconds,
            "backoff": backoff,
            "page_size": page_size,
        }
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
            for secret_type in CREDENTIAL_TYPES
        )
        self.service_account_informer: Informer[ServiceAccountInfo] = Informer(
            "serviceaccounts",
            core.list_service_account_for_all_namespaces,
            transform=sa_record,
            **options,
        )
        self.pvc_informer: Informer[PVCInfo] = Informer(
            "persistentvolumeclaims",
            core.list_persistent_volume_claim_for_all_namespaces,
            transform=pvc_record_of,
            **options,
        )
        self.claim_informer: Informer[ClaimInfo] = Informer(
            "resourceclaims",
            dra.list_resource_claim_for_all_namespaces,
            transform=resource_claim_info,
            optional=True,
            **options,
        )
        self.claim_template_informer: Informer[ClaimInfo] = Informer(
            "resourceclaimtemplates",
            dra.list_resource_claim_template_for_all_namespaces,
            transform=resource_claim_template_info,
            optional=True,
            **options,
        )
        self.device_class_informer: Informer[DeviceClassInfo] = Informer(
            "deviceclasses",
            dra.list_device_class,
            transform=device_class_info,
            optional=True,
            **options,
        )
        # Dataset cache snapshots (optional: clusters without the snapshot CRDs serve 404).
        self.snapshot_informer = snapshot_informer(api_client, config.names, **options)
        self._sources: dict[RefKind, _Source] = {
            "Secret": _Source(
                self.secret_informers, core.read_namespaced_secret, secret_info, SecretInfo
            ),
            "ServiceAccount": _Source(
                (self.service_account_informer,),
                core.read_namespaced_service_account,
                sa_record,
                ServiceAccountInfo,
            ),
            "PersistentVolumeClaim": _Source(
                (self.pvc_informer,),
                core.read_namespaced_persistent_volume_claim,
                pvc_record_of,
                PVCInfo,
            ),
            "ResourceClaim": _Source(
                (self.claim_informer,),
                dra.read_namespaced_resource_claim,
                resource_claim_info,
                ClaimInfo,
            ),
            "ResourceClaimTemplate": _Source(
                (self.claim_template_informer,),
                dra.read_namespaced_resource_claim_template,
                resource_claim_template_info,
                ClaimInfo,
            ),
            "DeviceClass": _Source(
                (self.device_class_informer,),
                dra.read_device_class,
                device_class_info,
                DeviceClassInfo,
            ),
        }

    @property
    def informers(self) -> tuple[Informer[Any], ...]:
        return (
            self.node_informer,
            *self.secret_informers,
            self.service_account_informer,
            self.pvc_informer,
            self.claim_informer,
            self.claim_template_informer,
            self.device_class_informer,
            self.snapshot_informer,
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

    def generation(self) -> int:
        # Each informer's count only grows, so the sum changes whenever any of them does. What
        # the side cache holds also ages out (its TTL): while it holds anything, the generation
        # moves on with each TTL that passes, so no answer built on it outlives it for long.
        changes = sum(i.changes for i in self.informers) + self._side.puts
        if len(self._side):
            changes += int(time.monotonic() / self._side_ttl) << 32
        return changes

    def secret(self, namespace: str, name: str) -> SecretInfo | None:
        return self.lookup(ObjectRef("Secret", namespace, name))  # type: ignore[return-value]

    def service_account(self, namespace: str, name: str) -> ServiceAccountInfo | None:
        return self.lookup(ObjectRef("ServiceAccount", namespace, name))  # type: ignore[return-value]

    def pvc(self, namespace: str, name: str) -> PVCInfo | None:
        return self.lookup(ObjectRef("PersistentVolumeClaim", namespace, name))  # type: ignore[return-value]

    def resource_claim(self, namespace: str, name: str) -> ClaimInfo | None:
        return self.lookup(ObjectRef("ResourceClaim", namespace, name))  # type: ignore[return-value]

    def resource_claim_template(self, namespace: str, name: str) -> ClaimInfo | None:
        ref = ObjectRef("ResourceClaimTemplate", namespace, name)
        return self.lookup(ref)  # type: ignore[return-value]

    def device_class(self, name: str) -> DeviceClassInfo | None:
        return self.lookup(ObjectRef("DeviceClass", "", name))  # type: ignore[return-value]

    def dataset_snapshots(self, namespace: str, key: str) -> Iterable[SnapshotInfo]:
        # A handful per source (the controller keeps few): a scan is cheap.
        return [
            s for s in self.snapshot_informer.values() if s.namespace == namespace and s.key == key
        ]

    def lookup(self, ref: ObjectRef) -> Record | None:
        """The informers' record, else a fresh enough GET result of the same kind."""
        source = self._sources[ref.kind]
        key = object_key(ref.namespace, ref.name)
        for informer in source.informers:
            found = informer.get(key)
            if found is not None:
                return found  # type: ignore[no-any-return]
        side = self._side.get(ref)
        return side if isinstance(side, source.record_type) else None

    # MissResolver.

    async def resolve(self, refs: Iterable[ObjectRef]) -> None:
        """Settle every ref not cached: a bounded wait for the informers, then one GET each.

        Afterwards each ref is either in the view or known not to exist (404). Refs of a kind the
        API server does not serve are settled at once: none exists. Raises ClusterLookupError
        when a GET fails, so the request is not judged on a guess.
        """
        missing = list(
            dict.fromkeys(
                ref for ref in refs if self._sources[ref.kind].served and self.lookup(ref) is None
            )
        )
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
                where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
                failures.append(f"{ref.kind} {where}: {describe_error(result)}")
        if failures:
            raise ClusterLookupError(
                "could not look up "
                + "; ".join(failures)
                + ". The object is not in the cache yet and the Kubernetes API did not answer; "
                "retry in a moment"
            )

    async def _wait_informer(self, ref: ObjectRef) -> Record | None:
        """The first informer of the ref's kind to hold it, within the wait."""
        key = object_key(ref.namespace, ref.name)
        informers = self._sources[ref.kind].informers
        if len(informers) == 1:
            return await informers[0].wait_for(key, self._wait_seconds)  # type: ignore[no-any-return]
        waits = [asyncio.ensure_future(i.wait_for(key, self._wait_seconds)) for i in informers]
        try:
            for arrival in asyncio.as_completed(waits):
                value = await arrival
                if value is not None:
                    return value  # type: ignore[no-any-return]
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
        source = self._sources[ref.kind]
        args = (ref.name, ref.namespace) if ref.namespace else (ref.name,)
        try:
            # Raw response: the client's model types cannot express _preload_content=False.
            response = cast(
                urllib3.BaseHTTPResponse,
                source.read(
                    *args,
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
            return source.transform(json.loads(response.data))
        finally:
            response.release_conn()

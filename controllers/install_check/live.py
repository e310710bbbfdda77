"""The live side of the install's self-check: one watch per kind, nothing more. The six
admission kinds (the two policy kinds and their bindings optional: older API servers serve none,
which is what tells their layout), Namespaces (only the two routing labels kept) and
ServiceAccounts (only those that carry the credentials annotation kept), and the workloads
whose pods are judged for GPU daemons: DaemonSets, Deployments, StatefulSets, Jobs, CronJobs and
Pods (only those with a container that wants the node's GPUs kept, trimmed; a Pod or Job of a
workload read here is judged through it and dropped: gpu_admission/gpus/daemons.py).

Each informer tells `on_change` of every change on its own thread; `snapshot()` reads the
caches as they are, on any thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

from kubernetes.client import ApiClient, CoreV1Api

from gpu_admission.admission.installed import (
    ADMISSION_KINDS,
    AccountRecord,
    LiveAdmission,
    account_record,
    namespace_labels,
    own_record,
)
from gpu_admission.cluster.informer import EventType, Informer
from gpu_admission.cluster.installed_objects import (
    admission_list_call,
    routing_labels,
    workload_list_calls,
)
from gpu_admission.config.model import Config
from gpu_admission.gpus.daemons import (
    WORKLOAD_KINDS,
    WorkloadRecord,
    read_shape,
    workload_record,
)

ON_CHANGE = Callable[[], None]
ADMISSION_PAGE_SIZE = 50
# Pod templates (and Pods' containers) are decoded a page at a time, then trimmed or dropped.
WORKLOAD_PAGE_SIZE = 100


class _Metadata(TypedDict, total=False):
    name: Any
    namespace: Any
    resourceVersion: Any
    labels: Any
    annotations: Any


class _MetadataOnly(TypedDict, total=False):
    """What a Namespace or a ServiceAccount is read for: the rest is never decoded."""

    metadata: _Metadata


class LiveInstall:
    """The informers the check reads; `start()`, `stop()`, and `snapshot()` between."""

    def __init__(self, api: ApiClient, config: Config, on_change: ON_CHANGE) -> None:
        core = CoreV1Api(api)

        def changed(_kind: EventType, _old: Any, _new: Any) -> None:
            on_change()

        self.admission: dict[str, Informer[dict[str, Any]]] = {
            kind.kind: Informer(
                f"install-{kind.plural}",
                admission_list_call(api, kind),
                transform=own_record(kind, config.certs.webhook_configuration_name),
                handlers=[changed],
                optional=kind.policy,
                # The cluster's other policies come in the same lists and are dropped: small
                # pages keep the decoded ones few at a time (a policy's CEL can be 30 KB).
                page_size=ADMISSION_PAGE_SIZE,
            )
            for kind in ADMISSION_KINDS
        }
        self.namespaces: Informer[dict[str, str]] = Informer(
            "install-namespaces",
            core.list_namespace,
            transform=namespace_labels(routing_labels(config)),
            handlers=[changed],
            shape=_MetadataOnly,
        )
        lists = workload_list_calls(api)
        # Only the workloads with a container that wants GPUs are kept, trimmed; a change to any
        # other (every Pod's status) changes no record and wakes no comparison.
        self.workloads: list[Informer[WorkloadRecord]] = [
            Informer(
                f"install-{kind.lower()}s",
                lists[kind],
                transform=workload_record(kind, config.gpu),
                handlers=[changed],
                page_size=WORKLOAD_PAGE_SIZE,
                shape=read_shape(kind),
            )
            for kind in WORKLOAD_KINDS
        ]
        self.accounts: Informer[AccountRecord] = Informer(
            "install-serviceaccounts",
            core.list_service_account_for_all_namespaces,
            transform=account_record(config.names.cloud_credentials),
            handlers=[changed],
            shape=_MetadataOnly,
        )

    @property
    def informers(self) -> list[Informer[Any]]:
        return [*self.admission.values(), self.namespaces, self.accounts, *self.workloads]

    def start(self) -> None:
        for informer in self.informers:
            informer.start()

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()

    def synced(self) -> bool:
        return all(informer.synced for informer in self.informers)

    def unsynced(self) -> list[str]:
        """What has not listed yet, and why where a list failed."""
        return [
            f"{i.name}: {i.last_sync_error or 'not listed yet'}"
            for i in self.informers
            if not i.synced
        ]

    def snapshot(self) -> LiveAdmission:
        objects = {
            (kind, str(record["metadata"]["name"])): record
            for kind, informer in self.admission.items()
            for record in informer.values()
        }
        served = frozenset(kind for kind, informer in self.admission.items() if informer.served)
        return LiveAdmission(
            objects,
            served,
            dict(self.namespaces.items()),
            self.accounts.values(),
            [w for informer in self.workloads for w in informer.values()],
        )

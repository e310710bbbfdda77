"""Reading what the install's self-check compares, from the API server: the list call of each
admission kind (for the controller's informers), and one paginated read of everything at once
(for `gpu-admission audit`, which runs once and watches nothing).

A kind the API server does not serve answers its list 404: that is how an older server's layout
shows (no MutatingAdmissionPolicy before 1.36, no admission policy at all before 1.30).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from kubernetes.client import (
    AdmissionregistrationV1Api,
    ApiClient,
    AppsV1Api,
    BatchV1Api,
    CoreV1Api,
)
from kubernetes.client.exceptions import ApiException

from gpu_admission.admission.installed import (
    ADMISSION_KINDS,
    AdmissionKind,
    CredentialsFinding,
    LiveAdmission,
    account_record,
    namespace_labels,
    own_record,
)
from gpu_admission.cluster.pages import Pages
from gpu_admission.config.model import Config
from gpu_admission.gpus.daemons import WORKLOAD_KINDS, workload_record

_SINGULAR = {
    "mutatingadmissionpolicies": "mutating_admission_policy",
    "mutatingadmissionpolicybindings": "mutating_admission_policy_binding",
    "validatingadmissionpolicies": "validating_admission_policy",
    "validatingadmissionpolicybindings": "validating_admission_policy_binding",
    "mutatingwebhookconfigurations": "mutating_webhook_configuration",
    "validatingwebhookconfigurations": "validating_webhook_configuration",
}


def admission_list_call(api: ApiClient, kind: AdmissionKind) -> Callable[..., Any]:
    """The client's list method of `kind` (list_mutating_admission_policy, ...)."""
    admission = AdmissionregistrationV1Api(api)
    return getattr(admission, f"list_{_SINGULAR[kind.plural]}")  # type: ignore[no-any-return]


def workload_list_calls(api: ApiClient) -> dict[str, Callable[..., Any]]:
    """The cluster-wide list call of each kind whose pods the self-check judges
    (`WORKLOAD_KINDS`)."""
    apps, batch, core = AppsV1Api(api), BatchV1Api(api), CoreV1Api(api)
    return {
        "DaemonSet": apps.list_daemon_set_for_all_namespaces,
        "Deployment": apps.list_deployment_for_all_namespaces,
        "StatefulSet": apps.list_stateful_set_for_all_namespaces,
        "Job": batch.list_job_for_all_namespaces,
        "CronJob": batch.list_cron_job_for_all_namespaces,
        "Pod": core.list_pod_for_all_namespaces,
    }


def routing_labels(config: Config) -> tuple[str, ...]:
    """The namespace labels routing reads: credentials routed, and exempt."""
    return (config.names.serviceaccount_credentials_label, config.exempt_label)


def read_installed(api: ApiClient, config: Config, pages: Pages) -> LiveAdmission:
    """Everything the self-check reads, in one paginated list per kind. Blocking."""
    objects: dict[tuple[str, str], Any] = {}
    served = set()
    for kind in ADMISSION_KINDS:
        try:
            kept = own_record(kind, config.certs.webhook_configuration_name)
            for obj in pages.items(admission_list_call(api, kind)):
                record = kept(obj)
                if record is not None:
                    objects[(kind.kind, record["metadata"]["name"])] = record
        except ApiException as error:
            if error.status != 404 or not kind.policy:
                raise
            continue
        served.add(kind.kind)
    core = CoreV1Api(api)
    labels = namespace_labels(routing_labels(config))
    namespaces = {
        str(ns["metadata"]["name"]): labels(ns) for ns in pages.items(core.list_namespace)
    }
    account = account_record(config.names.cloud_credentials)
    accounts = [
        record
        for obj in pages.items(core.list_service_account_for_all_namespaces)
        if (record := account(obj)) is not None
    ]
    lists = workload_list_calls(api)
    workloads = []
    for kind in WORKLOAD_KINDS:
        # Most Pods and workloads are dropped as they are read: a page at a time in memory.
        keep = workload_record(kind, config.gpu)
        workloads += [r for obj in pages.items(lists[kind]) if (r := keep(obj)) is not None]
    return LiveAdmission(objects, frozenset(served), namespaces, accounts, workloads)


# Whether a pod (a plain dict) of a bound ServiceAccount started without these Secrets.
Lacks = Callable[[dict[str, Any], tuple[str, ...]], bool]
# Up to this many namespaces, one list each; beyond, one list of every running pod.
NAMESPACED_LISTS = 20


def with_running_counts(
    api: ApiClient,
    findings: Sequence[CredentialsFinding],
    lacks: Lacks,
    pages: Pages | None = None,
) -> list[CredentialsFinding]:
    """Each finding with its ServiceAccount's running pods that lack its credentials counted.
    Running pods only (the API server filters by field selector), one paginated list per
    namespace with findings, or one of the whole cluster when they are many: the requests stay
    few however many ServiceAccounts are found. Blocking; raises ApiException."""
    if not findings:
        return []
    reader = pages or Pages()
    core = CoreV1Api(api)
    running = "status.phase=Running"
    wanted = {(f.namespace, f.service_account): f for f in findings}
    spaces = sorted({f.namespace for f in findings})
    if len(spaces) <= NAMESPACED_LISTS:
        listed = (
            pod
            for space in spaces
            for pod in reader.items(
                core.list_namespaced_pod, namespace=space, field_selector=running
            )
        )
    else:
        listed = reader.items(core.list_pod_for_all_namespaces, field_selector=running)
    counts = dict.fromkeys(wanted, 0)
    for pod in listed:
        key = (
            str((pod.get("metadata") or {}).get("namespace", "")),
            str((pod.get("spec") or {}).get("serviceAccountName") or "default"),
        )
        finding = wanted.get(key)
        if finding is not None and lacks(pod, finding.secrets):
            counts[key] += 1
    return [dataclasses.replace(f, running_without=counts[k]) for k, f in wanted.items()]

"""The audit of a whole cluster: every Pod, credential Secret and dataset PVC it holds, read with
paginated lists (one per kind, a credential type each for Secrets) and put to every policy by
`audit_object`, and every workload no other one controls, its pod templates put to the pod
policies by `audit_workload`, against a cluster view the caller brings (the informers' caches).
Where the base manifests route ServiceAccount-bound credentials by namespace label
(apiserver_policies.credential_namespaces), every ServiceAccount bound in a namespace without
the label is a finding too: its pods start without their credentials (a binding written before
the label was needed).

One implementation for `gpu-admission audit` and the controller's background scan, so that the
two always count the same. Objects are judged as their page arrives, so memory holds one page
and the findings, not the cluster. Blocking (the kubernetes client): run it in a thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_admission.admission.findings import WOULD_REFUSE, Finding
from gpu_admission.cluster.pages import Pages
from gpu_admission.cluster.view import ClusterView
from gpu_admission.config.model import Config
from gpu_admission.config.policy_modes import PolicyMode
from gpu_admission.names import CREDENTIAL_TYPES
from webhooks.apiserver_policies.credential_namespaces import binding_message, binds
from webhooks.apiserver_policies.webhook_routing import CREDENTIAL_NAMESPACE_POD_MUTATIONS
from webhooks.audit.objects import audit_object, ordered
from webhooks.audit.workloads import api_version, audit_workload, owned_by_workload
from webhooks.core.workload_kinds import kind_index
from webhooks.policies.interface import PolicySet

log = logging.getLogger(__name__)

PROGRESS_EVERY = 1000
WEBHOOK_CONFIGURATION = "gpu-admission"  # manifests/base/webhooks.yaml
CORE_KINDS = frozenset({"Pod", "Secret", "PersistentVolumeClaim"})
FINISHED = frozenset({"Succeeded", "Failed"})


@dataclass
class AuditRun:
    findings: list[Finding] = field(default_factory=list)
    objects: dict[str, int] = field(default_factory=dict)  # audited, by kind
    list_requests: int = 0


def exempt_namespaces(api: Any, config: Config) -> set[str]:
    """The namespaces the webhooks skip (one list, by label)."""
    return _labelled(api, config.exempt_label)


def _labelled(api: Any, label: str) -> set[str]:
    from kubernetes.client import CoreV1Api

    listed = CoreV1Api(api).list_namespace(label_selector=f"{label}=true")
    return {ns.metadata.name for ns in listed.items}


def routes_by_namespace(api: Any) -> bool:
    """Whether the cluster's pods mutating webhook has the base's entry for namespaces labelled
    for ServiceAccount-bound credentials (an overlay that sends the webhook every pod has not)."""
    from kubernetes.client import AdmissionregistrationV1Api, ApiException

    try:
        configuration = AdmissionregistrationV1Api(api).read_mutating_webhook_configuration(
            WEBHOOK_CONFIGURATION
        )
    except ApiException as error:
        if error.status not in (403, 404):
            raise
        log.warning(
            "cannot read the webhook configuration; ServiceAccount bindings are not audited",
            extra={"configuration": WEBHOOK_CONFIGURATION, "status": error.status},
        )
        return False
    return any(w.name == CREDENTIAL_NAMESPACE_POD_MUTATIONS for w in configuration.webhooks or [])


def unrouted_bindings(
    api: Any, config: Config, pages: Pages, labelled: set[str], namespace: str | None = None
) -> Iterator[Finding]:
    """A finding for each ServiceAccount bound to credentials outside the labelled namespaces."""
    from kubernetes.client import CoreV1Api

    core = CoreV1Api(api)
    call = (
        core.list_namespaced_service_account
        if namespace
        else core.list_service_account_for_all_namespaces
    )
    scope = {"namespace": namespace} if namespace else {}
    mode = str(config.mode_of("cloud-credentials"))
    for account in pages.items(call, **scope):
        meta = account.get("metadata") or {}
        where = str(meta.get("namespace", ""))
        if where in labelled or not binds(meta.get("annotations"), config):
            continue
        name = str(meta.get("name", ""))
        yield Finding(
            policy="cloud-credentials",
            result=WOULD_REFUSE,
            kind="ServiceAccount",
            namespace=where,
            name=name,
            message=binding_message(config, name, where),
            mode=mode,
            uid=str(meta.get("uid", "")),
        )


def audit_subjects(
    api: Any, config: Config, pages: Pages, namespace: str | None = None
) -> Iterator[dict[str, Any]]:
    """Pods not yet finished, the four credential Secret types (by field selector: the API
    server filters) and PVCs that carry a data source, page after page, each with its `kind`.
    A Succeeded or Failed pod runs nothing any more: nothing of it is at stake."""
    from kubernetes.client import CoreV1Api

    core = CoreV1Api(api)
    scope = {"namespace": namespace} if namespace else {}

    def listed(everywhere: Any, namespaced: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        yield from pages.items(namespaced if namespace else everywhere, **scope, **kwargs)

    for pod in listed(core.list_pod_for_all_namespaces, core.list_namespaced_pod):
        if (pod.get("status") or {}).get("phase") not in FINISHED:
            yield {**pod, "kind": "Pod"}
    for secret_type in CREDENTIAL_TYPES:
        for secret in listed(
            core.list_secret_for_all_namespaces,
            core.list_namespaced_secret,
            field_selector=f"type={secret_type}",
        ):
            yield {**secret, "kind": "Secret"}
    source = config.names.data_source
    for pvc in listed(
        core.list_persistent_volume_claim_for_all_namespaces,
        core.list_namespaced_persistent_volume_claim,
    ):
        if source in ((pvc.get("metadata") or {}).get("annotations") or {}):
            yield {**pvc, "kind": "PersistentVolumeClaim"}
    yield from workload_subjects(api, config, pages, namespace)


def workload_subjects(
    api: Any, config: Config, pages: Pages, namespace: str | None = None
) -> Iterator[dict[str, Any]]:
    """Every workload of a checked kind that no other one controls, each with its `kind`. A kind
    the cluster does not serve (no JobSet CRD) is skipped; one the audit may not list is
    reported in the log and skipped, so the rest of the audit still runs."""
    from kubernetes.client import ApiException, CoreV1Api, CustomObjectsApi

    kinds = kind_index(config)
    custom = CustomObjectsApi(api)
    core = CoreV1Api(api)
    for kind in kinds.values():
        version = kind.versions[0]
        if not kind.group:
            call: Any = (
                core.list_namespaced_replication_controller
                if namespace
                else core.list_replication_controller_for_all_namespaces
            )
            scope: dict[str, str] = {"namespace": namespace} if namespace else {}
        else:
            call = (
                custom.list_namespaced_custom_object
                if namespace
                else custom.list_cluster_custom_object
            )
            scope = {"group": kind.group, "version": version, "plural": kind.resource}
            if namespace:
                scope["namespace"] = namespace
        try:
            for obj in pages.items(call, **scope):
                if not owned_by_workload(obj, kinds):
                    yield {**obj, "kind": kind.kind, "apiVersion": api_version(kind)}
        except ApiException as error:
            if error.status != 404:
                log.warning(
                    "cannot list workloads",
                    extra={"kind": kind.kind, "group": kind.group, "status": error.status},
                )


def audit_cluster(
    api: Any,
    config: Config,
    policies: PolicySet,
    view: ClusterView,
    exempt: set[str],
    namespace: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    modes: Mapping[str, PolicyMode] | None = None,
) -> AuditRun:
    """Every finding among the objects outside exempt namespaces, ordered by policy and
    namespace. `progress(objects, findings)` is called every PROGRESS_EVERY objects."""
    pages = Pages()
    run = AuditRun()
    relaxed = config.relaxed_modes() if modes is None else modes
    kinds = kind_index(config)
    audited = 0
    if routes_by_namespace(api):
        label = config.names.serviceaccount_credentials_label
        labelled = _labelled(api, label) | exempt
        for finding in unrouted_bindings(api, config, pages, labelled, namespace):
            run.findings.append(finding)
            run.objects["ServiceAccount"] = run.objects.get("ServiceAccount", 0) + 1
    for obj in audit_subjects(api, config, pages, namespace):
        if (obj.get("metadata") or {}).get("namespace", "") in exempt:
            continue
        run.objects[obj["kind"]] = run.objects.get(obj["kind"], 0) + 1
        workload = kinds.get((str(obj.get("apiVersion", "")).rpartition("/")[0], obj["kind"]))
        if workload is not None and obj["kind"] not in CORE_KINDS:
            run.findings.extend(audit_workload(obj, workload, policies, view, relaxed))
        else:
            run.findings.extend(audit_object(obj, policies, view, relaxed))
        audited += 1
        if progress is not None and audited % PROGRESS_EVERY == 0:
            progress(audited, len(run.findings))
    run.findings = ordered(run.findings)
    run.list_requests = pages.requests
    return run

"""`gpu-admission review`: the admission chain, offline, over manifests.

Reads Pods, the pod templates of workload controllers, Secrets and PVCs from files, directories
or stdin; runs the same policies as the webhooks against cluster state from a file or a live
cluster; prints the mutated manifests on stdout and every change, warning and denial on stderr.
Exit status: 0 all allowed, 1 something denied, 2 usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import json
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, cast

import yaml

from commands.review_inputs import (
    CLAIM_KINDS,
    ClusterState,
    Document,
    UsageError,
    WithManifestClaims,
    live_state,
    load_cluster_state,
    load_documents,
    manifest_claims,
)
from gpu_admission.cluster.view import ClusterView, StaticClusterView
from gpu_admission.config import Config, ConfigError, load_config
from webhooks import chain
from webhooks.admission_policy import denial_text, has_resource_claims, policy_denial
from webhooks.pod_defaults import default_pod
from webhooks.policy import PolicySet
from webhooks.registry import build_policy_set, webhook_for
from webhooks.review import AdmissionRequest

EXIT_ALLOWED, EXIT_DENIED, EXIT_USAGE = 0, 1, 2
# Where the stateless pod checks run: the ValidatingAdmissionPolicy of the default manifests
# (Kubernetes 1.30+), or the validating webhook for every pod (the webhook-pod-checks overlay).
POD_CHECKS_POLICY, POD_CHECKS_WEBHOOK = "policy", "webhook"

# Where each workload kind keeps its pod template.
POD_TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
REVIEWED_KINDS = {"Pod", "Secret", "PersistentVolumeClaim", *POD_TEMPLATE_PATHS}


@dataclass
class Result:
    document: Document
    allowed: bool = True
    changes: int = 0
    warnings: list[str] = field(default_factory=list)
    denials: list[str] = field(default_factory=list)
    skipped: str = ""

    @property
    def identity(self) -> str:
        meta = self.document.obj.get("metadata") or {}
        namespace = meta.get("namespace")
        name = meta.get("name") or f"{meta.get('generateName', '')}<generated>"
        where = f"{namespace}/{name}" if namespace else name
        return f"{self.document.obj.get('kind')} {where} ({self.document.source})"


# -- running the chain -----------------------------------------------------------------------


def _merge_string_data(secret: dict[str, Any]) -> None:
    """The API server turns stringData into base64 data before any webhook sees it."""
    string_data = secret.pop("stringData", None) or {}
    if string_data:
        data = secret.setdefault("data", {}) or {}
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        secret["data"] = data


def _request(obj: dict[str, Any], kind: str, namespace: str) -> AdmissionRequest:
    meta = obj.get("metadata") or {}
    return AdmissionRequest(
        uid=str(uuid.uuid4()),
        kind=kind,
        resource={"Pod": "pods", "Secret": "secrets"}.get(kind, "persistentvolumeclaims"),
        sub_resource="",
        operation="CREATE",
        namespace=namespace,
        name=meta.get("name", ""),
        object=obj,
        old_object=None,
        dry_run=True,
    )


async def _admit(
    obj: dict[str, Any],
    kind: str,
    namespace: str,
    policies: PolicySet,
    state: ClusterState,
    config: Config,
    result: Result,
    pod_checks: str,
) -> dict[str, Any]:
    """Mutating then validating, as the API server runs them; returns the admitted object."""
    if kind == "Pod":
        obj = default_pod(obj)
    original = copy.deepcopy(obj)
    for mutating in (True, False):
        webhook = webhook_for(kind, mutating)
        if webhook is None:
            continue
        if kind == "Pod" and not mutating and pod_checks == POD_CHECKS_POLICY:
            # As installed on 1.30+: the ValidatingAdmissionPolicy first, then the validating
            # webhook for pods with DRA claims only.
            message = policy_denial(obj, config)
            if message is not None:
                result.allowed = False
                result.denials.append(denial_text(message))
                return obj
            if not has_resource_claims(obj):
                continue
        request = _request(obj, kind, namespace)
        selected = policies.mutating_for(kind) if mutating else policies.validating_for(kind)
        if state.resolver is not None:
            await chain.resolve_references(request, selected, state.view, state.resolver)
        if mutating:
            outcome = chain.run_mutating(
                request,
                selected,  # type: ignore[arg-type]
                state.view,
                config.failure_mode(webhook.path),
                lambda: copy.deepcopy(original),
            )
            obj = request.object
            result.changes += len(outcome.ops)
        else:
            outcome = chain.run_validating(
                request,
                selected,  # type: ignore[arg-type]
                state.view,
                config.failure_mode(webhook.path),
            )
        result.warnings.extend(outcome.warnings)
        if not outcome.allowed:
            result.allowed = False
            result.denials.append(outcome.message)
            return obj
    return obj


async def review_document(
    document: Document,
    policies: PolicySet,
    state: ClusterState,
    config: Config,
    pod_checks: str = POD_CHECKS_POLICY,
) -> Result:
    obj = copy.deepcopy(document.obj)
    result = Result(Document(document.source, obj))
    kind = obj.get("kind")
    meta = obj.setdefault("metadata", {}) or {}
    namespace = meta.get("namespace") or "default"
    if kind in CLAIM_KINDS:
        result.skipped = "not reviewed; read as cluster state by the pods that use it"
        return result
    if kind not in REVIEWED_KINDS:
        result.skipped = "no gpu-admission webhook reviews this kind"
        return result
    if namespace in state.exempt_namespaces:
        result.skipped = f"namespace {namespace} is exempt"
        return result
    if kind == "Secret":
        _merge_string_data(obj)
    if kind in POD_TEMPLATE_PATHS:
        *parents, last = POD_TEMPLATE_PATHS[kind]
        holder: Any = obj
        for key in parents:
            holder = holder.setdefault(key, {})
        template = holder.get(last) or {}
        template_meta = dict(template.get("metadata") or {})
        template_meta.setdefault("namespace", namespace)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": template_meta,
            "spec": template.get("spec") or {},
        }
        admitted = await _admit(pod, "Pod", namespace, policies, state, config, result, pod_checks)
        admitted_meta = dict(admitted.get("metadata") or {})
        if "namespace" not in (template.get("metadata") or {}):
            admitted_meta.pop("namespace", None)
        holder[last] = {**template, "metadata": admitted_meta, "spec": admitted.get("spec")}
    else:
        result.document.obj = await _admit(
            obj, kind, namespace, policies, state, config, result, pod_checks
        )
    return result


# -- output ----------------------------------------------------------------------------------


def _report(results: list[Result], err: TextIO) -> None:
    for result in results:
        if result.skipped:
            err.write(f"{result.identity}: skipped ({result.skipped})\n")
            continue
        if result.allowed:
            changes = f"{result.changes} change{'s' if result.changes != 1 else ''}"
            err.write(f"{result.identity}: allowed, {changes}\n")
        else:
            err.write(f"{result.identity}: DENIED\n")
            for denial in result.denials:
                err.write(f"  denied: {denial}\n")
        for warning in result.warnings:
            err.write(f"  warning: {warning}\n")


def _printable(results: list[Result]) -> list[dict[str, Any]]:
    # Secrets are reviewed but never printed: the output must not carry secret values.
    return [r.document.obj for r in results if r.allowed and r.document.obj.get("kind") != "Secret"]


def _write(objects: list[dict[str, Any]], output: str, out: TextIO) -> None:
    if output == "json":
        json.dump({"apiVersion": "v1", "kind": "List", "items": objects}, out, indent=2)
        out.write("\n")
    else:
        yaml.safe_dump_all(objects, out, sort_keys=False, default_flow_style=False)


# -- command ---------------------------------------------------------------------------------


def add_review_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "review",
        help="run the admission chain offline over manifests",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-f",
        "--filename",
        dest="paths",
        action="append",
        required=True,
        metavar="PATH",
        help="manifest file, directory (searched recursively) or - for stdin; repeatable",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--cluster-state",
        type=Path,
        metavar="FILE",
        help="YAML list of Nodes, ServiceAccounts, Secrets, PVCs, Namespaces, DeviceClasses, "
        "ResourceClaims and ResourceClaimTemplates to review against",
    )
    source.add_argument(
        "--kubeconfig", type=Path, metavar="FILE", help="review against a live cluster"
    )
    parser.add_argument("--config", type=Path, metavar="FILE", help="gpu-admission config file")
    parser.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    parser.add_argument(
        "--pod-checks",
        choices=(POD_CHECKS_POLICY, POD_CHECKS_WEBHOOK),
        default=POD_CHECKS_POLICY,
        help="where the cluster runs the stateless pod checks: the ValidatingAdmissionPolicy "
        "of the default manifests (policy, the default) or the validating webhook of the "
        "webhook-pod-checks overlay; denials are worded as that one words them",
    )
    parser.set_defaults(func=review_command)


async def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config = load_config(args.config)
    documents = load_documents(args.paths, sys.stdin)
    policies = build_policy_set(config)
    live = None
    if args.kubeconfig is not None:
        state, live = await live_state(args.kubeconfig, config)
    elif args.cluster_state is not None:
        state = load_cluster_state(args.cluster_state, config)
    else:
        state = ClusterState(StaticClusterView(), set())
    claims = manifest_claims(documents)
    if claims:
        view = cast(ClusterView, WithManifestClaims(state.view, claims))
        state = ClusterState(view, state.exempt_namespaces, state.resolver)
    try:
        results = [
            await review_document(d, policies, state, config, args.pod_checks) for d in documents
        ]
    finally:
        if live is not None:
            live.stop()
    _report(results, err)
    _write(_printable(results), args.output, out)
    return EXIT_DENIED if any(not r.allowed for r in results) else EXIT_ALLOWED


def review_command(
    args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        return asyncio.run(_run(args, out, err))
    except (UsageError, ConfigError) as exc:
        err.write(f"error: {exc}\n")
        return EXIT_USAGE

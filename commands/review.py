"""`gpu-admission review`: the admission chain, offline, over manifests.

Reads Pods, the pod templates of workload controllers, Secrets and PVCs from files, directories
or stdin; runs the same policies as the webhooks against cluster state from a file or a live
cluster; prints the mutated manifests on stdout and every change, warning and denial on stderr.
Exit status: 0 all allowed, 1 something denied, 2 usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any, TextIO

import yaml

from commands.review_applied import AppliedView, applied_state, labelled_by
from commands.review_inputs import (
    UsageError,
    live_state,
    load_cluster_state,
    load_documents,
    manifest_claims,
)
from gpu_admission.cluster.view import StaticClusterView
from gpu_admission.config.model import Config, ConfigError, load_config
from gpu_admission.config.workloads import PodChecksIn
from webhooks.dispatch.registry import build_policy_set
from webhooks.offline.review import (
    POD_CHECKS_POLICY,
    POD_CHECKS_WEBHOOK,
    POD_MUTATIONS_POLICY,
    POD_MUTATIONS_WEBHOOK,
    review_document,
)
from webhooks.offline.state import ClusterState, Result

EXIT_ALLOWED, EXIT_DENIED, EXIT_USAGE = 0, 1, 2
# -- output ----------------------------------------------------------------------------------


def _report_modes(config: Config, err: TextIO) -> None:
    """The policies that do not enforce: what they found is shown, marked "not enforced"."""
    relaxed = {
        name: mode for name, mode in config.relaxed_modes().items() if name in config.policies
    }
    if relaxed:
        modes = ", ".join(f"{name} {mode}" for name, mode in relaxed.items())
        err.write(f"policies not enforcing: {modes}; every other policy enforces\n")


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
        for record in result.recorded:
            err.write(f"  not enforced: {record}\n")


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
    parser.add_argument(
        "--pod-mutations",
        choices=(POD_MUTATIONS_POLICY, POD_MUTATIONS_WEBHOOK),
        default=None,
        help="where the cluster makes the stateless pod changes: the MutatingAdmissionPolicy of "
        "the default manifests, the webhook only for the pods that need cluster state (policy, "
        "the default; Kubernetes 1.36+), or the mutating webhook for every pod of the "
        "webhook-pod-mutations overlay (webhook; implied by --pod-checks webhook)",
    )
    parser.set_defaults(func=review_command)


async def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config = load_config(args.config)
    if args.pod_checks == POD_CHECKS_WEBHOOK and args.pod_mutations == POD_MUTATIONS_POLICY:
        raise UsageError(
            "--pod-checks webhook is the webhook-pod-checks overlay, which is built on "
            "webhook-pod-mutations: its pod mutations are the webhook's (drop --pod-mutations)"
        )
    pod_mutations = args.pod_mutations or (
        POD_MUTATIONS_WEBHOOK if args.pod_checks == POD_CHECKS_WEBHOOK else POD_MUTATIONS_POLICY
    )
    if args.pod_checks == POD_CHECKS_WEBHOOK:
        # The overlay's workloads webhook refuses what the workload policy would.
        workloads = config.workloads.model_copy(update={"pod_checks": PodChecksIn.WEBHOOK})
        config = config.model_copy(update={"workloads": workloads})
    documents = load_documents(args.paths, sys.stdin)
    policies = build_policy_set(config)
    live = None
    if args.kubeconfig is not None:
        state, live = await live_state(args.kubeconfig, config)
    elif args.cluster_state is not None:
        state = load_cluster_state(args.cluster_state, config)
    else:
        state = ClusterState(StaticClusterView(), set())
    # Reviewed in the order given, each against what the objects before it created.
    view = AppliedView(state.view, manifest_claims(documents))
    state = applied_state(state, view)
    results = []
    try:
        for document in documents:
            result = await review_document(
                document, policies, state, config, args.pod_checks, pod_mutations
            )
            results.append(result)
            if result.allowed:
                view.applied(result.document.obj)
                exempted = labelled_by(result.document.obj, config.exempt_label)
                if exempted is not None:
                    state.exempt_namespaces.add(exempted)
                label = config.names.serviceaccount_credentials_label
                marked = labelled_by(result.document.obj, label)
                if marked is not None:
                    state.credential_namespaces.add(marked)
    finally:
        if live is not None:
            live.stop()
    _report_modes(config, err)
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

"""`gpu-admission audit`: what the policies would refuse or change among the objects a cluster
already holds (pods, the four credential Secret types, dataset PVCs), and what they would refuse
of the pods of its workloads (Deployments, Jobs, CronJobs, JobSets, ...: their pod templates),
read with paginated lists and judged by the same policy code the webhooks run
(`webhooks/audit/objects.py`, `webhooks/audit/workloads.py`), against the cluster view the
service builds (Nodes, ServiceAccounts, Secrets, PVCs, DRA objects).

First, the section "installed admission objects" (`commands/audit_installed.py`): each
admission object the configuration implies against the live one, the ServiceAccounts whose
credentials are not routed, and whether GPU isolation is enforced: what the controller's
self-check reports inside the cluster.

With `--sources`, also the loaded dataset PVCs whose source changed since they were loaded: a
Job per PVC lists its source with the PVC's own credentials and the digests are compared
(`controllers/dataset/source_version_audit.py`).

Output: a table grouped by policy and namespace (pods that may see GPUs they were not given, and
shared-GPU pods without a memory share, first), or `-o json` / `-o yaml`. A progress line goes to
stderr as objects are read. Exit status: 0 nothing found, 1 findings, or GPU isolation not
enforced (the objects that give CPU-only pods NVIDIA_VISIBLE_DEVICES=none missing or stale), 2
usage or read error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

import yaml

from commands.audit_installed import InstalledSection, as_dict, installed_section, write_table
from commands.review_inputs import UsageError, live_state
from controllers.dataset.source_version_audit import (
    DEFAULT_PARALLEL,
    DEFAULT_TIMEOUT_SECONDS,
    SourceChecks,
    list_loaded,
)
from gpu_admission.admission.findings import Finding
from gpu_admission.cluster.kube import ClusterConfigError, api_client
from gpu_admission.cluster.own_image import loader_image, with_loader_image
from gpu_admission.config.model import Config, ConfigError, load_config
from webhooks.audit.cluster import audit_cluster
from webhooks.dispatch.registry import build_policy_set

EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


async def _audit(
    args: argparse.Namespace, err: TextIO
) -> tuple[list[Finding], dict[str, Any], InstalledSection]:
    config = load_config(args.config)
    policies = build_policy_set(config)
    api = api_client(args.kubeconfig)

    def progress(objects: int, findings: int) -> None:
        err.write(f"audited {objects} objects, {findings} findings\n")

    sources: list[Finding] = []
    try:
        installed = await asyncio.to_thread(installed_section, api, config)
        state, live = await live_state(args.kubeconfig, config)
        try:
            run = await asyncio.to_thread(
                audit_cluster,
                api,
                config,
                policies,
                state.view,
                state.exempt_namespaces,
                args.namespace,
                progress,
            )
        finally:
            live.stop()
        if args.sources:
            checked = await asyncio.to_thread(_check_sources, args, api, config, err)
            sources, count, requests = checked
            run.objects["dataset sources"] = count
            run.list_requests += requests
    finally:
        api.close()
    summary = {"objects": run.objects, "listRequests": run.list_requests}
    return run.findings + sources, summary, installed


def _check_sources(
    args: argparse.Namespace, api: Any, config: Config, err: TextIO
) -> tuple[list[Finding], int, int]:
    """(the findings, the PVCs checked, the list requests) of `--sources`."""
    loaded, requests = list_loaded(api, config, args.namespace)
    err.write(
        f"checking the sources of {len(loaded)} loaded dataset PVC(s): a Job each in its "
        f"namespace, {args.sources_parallel} at a time, {args.sources_timeout} s each at most\n"
    )
    config = with_loader_image(config, loader_image(config, api, os.environ))
    checks = SourceChecks(api, config, args.sources_timeout, args.sources_parallel)
    return checks.run(loaded), len(loaded), requests


def _table(findings: list[Finding], out: TextIO) -> None:
    policy = None
    for finding in findings:
        if finding.policy != policy:
            policy = finding.policy
            group = [f for f in findings if f.policy == policy]
            spaces = len({f.namespace for f in group})
            mode = "" if finding.mode == "enforce" else f" ({finding.mode} mode)"
            out.write(f"\n{policy}{mode}: {len(group)} object(s) in {spaces} namespace(s)\n")
        where = f"{finding.namespace}/{finding.name}" if finding.namespace else finding.name
        out.write(f"  {finding.result:<13} {finding.kind} {where}: {finding.message}\n")


def _by_policy(findings: Iterable[Finding]) -> dict[str, int]:
    counted: dict[str, int] = {}
    for finding in findings:
        counted[finding.policy] = counted.get(finding.policy, 0) + 1
    return counted


def audit_command(
    args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        findings, summary, installed = asyncio.run(_audit(args, err))
    except (UsageError, ConfigError, ClusterConfigError) as exc:
        err.write(f"error: {exc}\n")
        return EXIT_USAGE
    summary["findingsByPolicy"] = _by_policy(findings)
    if args.output == "table":
        write_table(installed, out)
        if findings:
            _table(findings, out)
        objects = ", ".join(f"{n} {k}" for k, n in sorted(summary["objects"].items()))
        err.write(f"audited {objects or 'nothing'}; {len(findings)} finding(s)\n")
    else:
        report = {
            "installedAdmissionObjects": as_dict(installed),
            "findings": [f.as_dict() for f in findings],
            "summary": summary,
        }
        if args.output == "json":
            json.dump(report, out, indent=2)
            out.write("\n")
        else:
            yaml.safe_dump(report, out, sort_keys=False)
    return EXIT_FINDINGS if findings or installed.isolation_not_enforced else EXIT_CLEAN


def add_audit_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="report what the policies would refuse or change among the cluster's objects",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="FILE",
        help="the cluster to read (default: the pod's in-cluster ServiceAccount, as in "
        "`kubectl -n gpu-admission exec deploy/gpu-admission -- gpu-admission audit`)",
    )
    parser.add_argument(
        "-n", "--namespace", metavar="NS", help="audit one namespace (default: every namespace)"
    )
    parser.add_argument("--config", type=Path, metavar="FILE", help="gpu-admission config file")
    parser.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    parser.add_argument(
        "--sources",
        action="store_true",
        help="also list the loaded dataset PVCs whose source changed since they were loaded: "
        "reads the stores, through a Job per PVC with the PVC's own credentials (needs to "
        "create and delete Jobs and list pods in their namespaces)",
    )
    parser.add_argument(
        "--sources-timeout",
        type=int,
        default=DEFAULT_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help=f"how long one source check may take (default {DEFAULT_TIMEOUT_SECONDS})",
    )
    parser.add_argument(
        "--sources-parallel",
        type=int,
        default=DEFAULT_PARALLEL,
        metavar="N",
        help=f"how many source checks run at once (default {DEFAULT_PARALLEL})",
    )
    parser.set_defaults(func=audit_command)

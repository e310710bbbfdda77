"""`gpu-admission audit`: what the policies would refuse or change among the objects a cluster
already holds (pods, the four credential Secret types, dataset PVCs), and what they would refuse
of the pods of its workloads (Deployments, Jobs, CronJobs, JobSets, ...: their pod templates),
read with paginated lists and judged by the same policy code the webhooks run
(`webhooks/audit.py`, `webhooks/workload_audit.py`), against the cluster view the service builds
(Nodes, ServiceAccounts, Secrets, PVCs, DRA objects).

Output: a table grouped by policy and namespace (pods that may see GPUs they were not given, and
shared-GPU pods without a memory share, first), or `-o json` / `-o yaml`. A progress line goes to
stderr as objects are read. Exit status: 0 nothing found, 1 findings, 2 usage or read error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

import yaml

from commands.review_inputs import UsageError, live_state
from gpu_admission.cluster.kube import ClusterConfigError, api_client
from gpu_admission.config import ConfigError, load_config
from gpu_admission.findings import Finding
from webhooks.cluster_audit import audit_cluster
from webhooks.registry import build_policy_set

EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


async def _audit(args: argparse.Namespace, err: TextIO) -> tuple[list[Finding], dict[str, Any]]:
    config = load_config(args.config)
    policies = build_policy_set(config)
    api = api_client(args.kubeconfig)

    def progress(objects: int, findings: int) -> None:
        err.write(f"audited {objects} objects, {findings} findings\n")

    try:
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
    finally:
        api.close()
    summary = {"objects": run.objects, "listRequests": run.list_requests}
    return run.findings, summary


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
        findings, summary = asyncio.run(_audit(args, err))
    except (UsageError, ConfigError, ClusterConfigError) as exc:
        err.write(f"error: {exc}\n")
        return EXIT_USAGE
    summary["findingsByPolicy"] = _by_policy(findings)
    if args.output == "table":
        if findings:
            _table(findings, out)
        objects = ", ".join(f"{n} {k}" for k, n in sorted(summary["objects"].items()))
        err.write(f"audited {objects or 'nothing'}; {len(findings)} finding(s)\n")
    else:
        report = {"findings": [f.as_dict() for f in findings], "summary": summary}
        if args.output == "json":
            json.dump(report, out, indent=2)
            out.write("\n")
        else:
            yaml.safe_dump(report, out, sort_keys=False)
    return EXIT_FINDINGS if findings else EXIT_CLEAN


def add_audit_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="report what the policies would refuse or change among the cluster's objects",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--kubeconfig", type=Path, metavar="FILE", required=True, help="the cluster to read"
    )
    parser.add_argument(
        "-n", "--namespace", metavar="NS", help="audit one namespace (default: every namespace)"
    )
    parser.add_argument("--config", type=Path, metavar="FILE", help="gpu-admission config file")
    parser.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    parser.set_defaults(func=audit_command)

"""`gpu-admission audit`'s section "installed admission objects": the same findings as the
controller's self-check (controllers/install_check), from outside the cluster. Every admission
object the configuration implies, against the live one, for the layout the API server calls
for; the ServiceAccounts bound to credentials in namespaces whose pods are not routed, with their
running pods that lack them; and whether GPU isolation is enforced.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TextIO

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from gpu_admission.admission.installed import InstallReport, ObjectState
from gpu_admission.cluster.informer import describe_error
from gpu_admission.cluster.installed_objects import read_installed, with_running_counts
from gpu_admission.cluster.pages import Pages
from gpu_admission.config.model import Config
from webhooks.apiserver_policies.install_expectation import check_install, lacks_credentials

TITLE = "installed admission objects"


@dataclasses.dataclass
class InstalledSection:
    report: InstallReport | None
    error: str = ""  # why the objects could not be read
    list_requests: int = 0

    @property
    def isolation_not_enforced(self) -> bool:
        """Known not to be: the audit then exits non-zero. Unread (the caller may not list
        admission objects) is said in the section, and is not known."""
        report = self.report
        return (
            report is not None and not report.isolation_enforced and not report.isolation_by_nodes
        )


def installed_section(api: ApiClient, config: Config) -> InstalledSection:
    """Blocking: one paginated list per kind, then the running pods of the namespaces with
    unrouted ServiceAccounts."""
    pages = Pages()
    try:
        report = check_install(config, read_installed(api, config, pages))
        counted = with_running_counts(
            api,
            report.credentials,
            lambda pod, secrets: lacks_credentials(pod, secrets, config),
            pages,
        )
    except ApiException as error:
        return InstalledSection(None, describe_error(error), pages.requests)
    report = dataclasses.replace(report, credentials=tuple(counted))
    return InstalledSection(report, list_requests=pages.requests)


def _isolation(report: InstallReport) -> str:
    if report.isolation_by_nodes:
        return (
            "GPU isolation: left to the nodes' NVIDIA container toolkit (gpu.visibility_policy: "
            "false; docs/compatibility.md)"
        )
    if report.isolation_enforced:
        return "GPU isolation: enforced (CPU-only pods are given NVIDIA_VISIBLE_DEVICES=none)"
    carriers = [o for o in report.objects if o.isolation]
    if not carriers:
        return "GPU isolation: NOT enforced: gpu-visibility is not in enforce mode"
    broken = ", ".join(f"{o.kind} {o.name} ({o.state})" for o in carriers if o.state != "ok")
    return f"GPU isolation: NOT enforced: {broken}"


def write_table(section: InstalledSection, out: TextIO) -> None:
    out.write(f"\n{TITLE}")
    report = section.report
    if report is None:
        out.write(f": not checked: {section.error}\n")
        return
    counts = {s: sum(1 for o in report.objects if o.state is s) for s in ObjectState}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items())
    out.write(f" ({report.layout}): {summary}\n")
    for finding in report.problems:
        out.write(f"  {finding.state:<13} {finding.message}\n")
    for account in report.credentials:
        out.write(f"  {'not routed':<13} {account.message}\n")
    for daemon in report.daemons:
        out.write(f"  {'blinded':<13} {daemon.message}\n")
    out.write(f"  {_isolation(report)}\n")


def as_dict(section: InstalledSection) -> dict[str, Any]:
    report = section.report
    if report is None:
        return {"checked": False, "error": section.error}
    return {
        "checked": True,
        "listRequests": section.list_requests,
        "layout": report.layout,
        "gpuIsolationEnforced": report.isolation_enforced,
        "objects": [
            {
                "kind": o.kind,
                "name": o.name,
                "state": str(o.state),
                "detail": o.detail,
                "fix": o.fix,
            }
            for o in report.objects
        ],
        "credentialsNotRouted": [
            {
                "namespace": c.namespace,
                "serviceAccount": c.service_account,
                "secrets": list(c.secrets),
                "runningPodsWithout": c.running_without,
                "fix": c.fix,
            }
            for c in report.credentials
        ],
        "blindedGpuDaemons": [
            {
                "kind": d.kind,
                "namespace": d.namespace,
                "name": d.name,
                "containers": list(d.containers),
                "how": d.how,
                "gpuDaemon": d.daemon,  # False: a workload of users', asked to ask by resource
                "fix": d.fix,
            }
            for d in report.daemons
        ],
    }

"""The reports in the cluster: read with one paginated list (ours, by label), written in place.

A report is created once per namespace and then replaced with its resourceVersion (updated in
place, never deleted and recreated, so watchers such as Policy Reporter see updates), left alone
when nothing a reader sees changed, and deleted when its namespace has nothing left to report.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from controllers.reports.build import MANAGED_SELECTOR, ReportKind, unchanged
from gpu_admission.cluster.api_errors import namespace_terminating
from gpu_admission.cluster.pages import Pages

log = logging.getLogger(__name__)

CREATED, UPDATED, DELETED, UNCHANGED, CONFLICTED = (
    "created",
    "updated",
    "deleted",
    "unchanged",
    "conflicted",
)


@dataclass
class WriteTally:
    by_operation: dict[str, int] = field(default_factory=dict)
    requests: int = 0

    def count(self, operation: str) -> None:
        self.by_operation[operation] = self.by_operation.get(operation, 0) + 1


class ReportStore:
    def __init__(self, api: ApiClient, kind: ReportKind, name: str, omitted_key: str) -> None:
        self.custom = CustomObjectsApi(api)
        self.kind = kind
        self.name = name
        self.omitted_key = omitted_key

    def _path(self) -> dict[str, str]:
        return {"group": self.kind.group, "version": self.kind.version, "plural": self.kind.plural}

    def current(self, pages: Pages) -> dict[str, dict[str, Any]]:
        """Namespace -> our report there (by the managed-by label and our name)."""
        reports = {}
        for report in pages.items(
            self.custom.list_cluster_custom_object,
            **self._path(),
            label_selector=MANAGED_SELECTOR,
        ):
            meta = report.get("metadata") or {}
            if meta.get("name") == self.name:
                reports[str(meta.get("namespace"))] = report
        return reports

    def write(
        self,
        current: Mapping[str, Mapping[str, Any]],
        desired: Mapping[str, dict[str, Any]],
    ) -> WriteTally:
        """Make the cluster hold `desired`: create, replace in place, or delete. A conflict (a
        report changed under us) is left for the next scan, which reads it again."""
        tally = WriteTally()
        for namespace, body in desired.items():
            existing = current.get(namespace)
            if existing is not None and unchanged(existing, body, self.omitted_key):
                tally.count(UNCHANGED)
                continue
            tally.requests += 1
            if existing is None:
                try:
                    self.custom.create_namespaced_custom_object(
                        **self._path(), namespace=namespace, body=body
                    )
                    tally.count(CREATED)
                except ApiException as error:
                    # 409: made since we listed; 404: its namespace went away; 403 with
                    # NamespaceTerminating: it is going. All settle at the next scan.
                    if error.status not in (404, 409) and not namespace_terminating(error):
                        raise
                    tally.count(CONFLICTED)
                continue
            version = (existing.get("metadata") or {}).get("resourceVersion")
            replacement = {**body, "metadata": {**body["metadata"], "resourceVersion": version}}
            try:
                self.custom.replace_namespaced_custom_object(
                    **self._path(), namespace=namespace, name=self.name, body=replacement
                )
                tally.count(UPDATED)
            except ApiException as error:
                if error.status != 409:
                    raise
                log.info(
                    "report changed while writing it; the next scan writes it again",
                    extra={"namespace": namespace, "report": self.name},
                )
                tally.count(CONFLICTED)
        for namespace in set(current) - set(desired):
            tally.requests += 1
            try:
                self.custom.delete_namespaced_custom_object(
                    **self._path(), namespace=namespace, name=self.name
                )
            except ApiException as error:
                if error.status != 404:
                    raise
            tally.count(DELETED)
        return tally

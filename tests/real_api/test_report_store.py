"""The report store on a real kube-apiserver 1.36: a namespace being deleted refuses new content
(403, cause NamespaceTerminating); its report is left for the next scan, and the other
namespaces' reports are still written."""

from __future__ import annotations

import pytest
from kubernetes import client

from controllers.reports.build import MANAGED_SELECTOR, REPORT_KINDS
from controllers.reports.store import CONFLICTED, CREATED, ReportStore
from tests.real_api.conftest import namespace_ready
from tests.support.waits import while_running

GOING, STAYING = "reports-going", "reports-staying"
HOLD = "example.com/hold"  # a finalizer no controller removes: the namespace stays Terminating
KIND = REPORT_KINDS["policyreport"]


def report(namespace: str) -> dict:
    key, _, value = MANAGED_SELECTOR.partition("=")
    return {
        "apiVersion": KIND.api_version,
        "kind": KIND.kind,
        "metadata": {"name": "gpu-admission", "namespace": namespace, "labels": {key: value}},
        "results": [],
        "summary": {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0},
    }


@pytest.fixture
def terminating(api: client.ApiClient, crds: None):
    core = client.CoreV1Api(api)
    namespace_ready(api, GOING)
    namespace_ready(api, STAYING)
    held = {"metadata": {"name": "held", "finalizers": [HOLD]}}
    core.create_namespaced_config_map(GOING, held)
    core.delete_namespace(GOING)
    while_running(
        lambda: core.read_namespace(GOING).status.phase == "Terminating",
        "the namespace to be terminating",
        {},
        30,
    )
    yield
    core.patch_namespaced_config_map("held", GOING, {"metadata": {"finalizers": None}})


def test_a_terminating_namespace_does_not_stop_the_others(
    api: client.ApiClient, terminating: None
) -> None:
    store = ReportStore(api, KIND, "gpu-admission", "gpu-admission.io/results-omitted")
    tally = store.write({}, {GOING: report(GOING), STAYING: report(STAYING)})
    assert tally.by_operation == {CONFLICTED: 1, CREATED: 1}
    made = client.CustomObjectsApi(api).get_namespaced_custom_object(
        KIND.group, KIND.version, STAYING, KIND.plural, "gpu-admission"
    )
    assert made["metadata"]["namespace"] == STAYING

"""docs/workloads.md: its configuration is accepted as written, its kinds are the ones checked,
and the controller routes its kinds to the workloads webhook."""

from __future__ import annotations

import re

import yaml

from gpu_admission.config.model import Config
from tests import ROOT
from webhooks.apiserver_policies.webhook_configurations import (
    WORKLOADS_WEBHOOK,
    webhook_configurations,
)
from webhooks.core.workload_kinds import BUILT_IN, template_kinds

DOC = (ROOT / "docs" / "workloads.md").read_text()


def blocks() -> list[str]:
    return re.findall(r"^ *```yaml\n(.*?)^ *```", DOC, re.S | re.M)


def test_the_extra_kinds_example_is_a_valid_configuration() -> None:
    [example] = [yaml.safe_load(b) for b in blocks() if b.lstrip().startswith("workloads:")]
    config = Config.model_validate(example)
    kinds = {k.kind for k in template_kinds(config)}
    assert {"PyTorchJob", "TFJob", "RayCluster", "RayJob", "JobSet"} <= kinds


def test_every_built_in_kind_is_in_the_table() -> None:
    for kind in BUILT_IN:
        assert f"| {kind.kind}" in DOC or f", {kind.kind}" in DOC, kind.kind


def test_the_controller_writes_the_example_kinds_into_the_workloads_webhook() -> None:
    """The page's settings alone route the new kinds to the workloads webhook: the controller
    writes its rules from them (no patch of the webhook configuration)."""
    [example] = [yaml.safe_load(b) for b in blocks() if b.lstrip().startswith("workloads:")]
    [validating] = webhook_configurations(Config.model_validate(example))[1:]
    [workloads] = [w for w in validating["webhooks"] if w["name"] == WORKLOADS_WEBHOOK]
    resources = {(g, r) for rule in workloads["rules"] for g in rule["apiGroups"]
                 for r in rule["resources"]}  # fmt: skip
    assert {("kubeflow.org", "pytorchjobs"), ("kubeflow.org", "tfjobs")} <= resources
    assert ("ray.io", "rayclusters") in resources

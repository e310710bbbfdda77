"""docs/workloads.md: its configuration is accepted as written, its kinds are the ones checked,
and its webhook patch applies to the webhook the base ships."""

from __future__ import annotations

import re

import jsonpatch
import yaml

from gpu_admission.config.model import Config
from tests import ROOT
from tests.world.harness import render
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


def test_the_rules_patch_applies_to_the_shipped_webhook() -> None:
    [overlay] = [yaml.safe_load(b) for b in blocks() if b.lstrip().startswith("patches:")]
    ops = yaml.safe_load(overlay["patches"][0]["patch"])
    [validating] = [d for d in render("manifests") if d["kind"] == "ValidatingWebhookConfiguration"]
    patched = jsonpatch.apply_patch(validating, ops)
    rules = patched["webhooks"][3]["rules"]
    assert rules[-1]["resources"] == ["pytorchjobs", "tfjobs"]

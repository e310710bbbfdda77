"""The webhook configurations the base's controller writes are what `webhook_configurations`
makes of the deployed configuration, and `admission-policy --webhook-configurations` prints them:
one generator for the cluster, the self-check and the command."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import yaml

from commands.admission_policy import admission_policy_command
from gpu_admission.config.model import Config
from tests import ROOT
from tests.world.harness import installed_render
from webhooks.apiserver_policies.webhook_configurations import Layout, webhook_configurations


def test_the_base_controller_writes_the_generated_ones() -> None:
    written = [d for d in installed_render("manifests") if d["kind"].endswith("Configuration")]
    assert written == webhook_configurations(Config())


def test_the_command_prints_them_for_a_layout() -> None:
    text = _printed(None, layout="webhook-pod-checks", webhooks=True)
    printed = list(yaml.safe_load_all(text))
    assert printed == webhook_configurations(Config(), Layout.POD_CHECKS)
    pods, *_, workloads = printed[1]["webhooks"]
    assert "matchConditions" not in pods  # every pod is judged by the webhook there
    assert workloads["failurePolicy"] == "Fail"
    assert "&id" not in text  # plain YAML, no anchors


def _printed(config: Path | None, *, layout: str | None = None, webhooks: bool = False) -> str:
    out = io.StringIO()
    args = argparse.Namespace(
        config=config,
        webhook_condition=False,
        mutating_webhooks=False,
        webhook_configurations=webhooks,
        layout=layout,
    )
    assert admission_policy_command(args, out) == 0
    return out.getvalue()


def test_without_layout_the_command_prints_the_configurations_own(tmp_path: Path) -> None:
    """The in-pod command on an older server (a layout component's layer in its configuration)
    prints what that server accepts: no MutatingAdmissionPolicy on 1.30 to 1.35."""
    layer = ROOT / "manifests" / "components" / "webhook-pod-mutations" / "layout.yaml"
    kinds = {d["kind"] for d in yaml.safe_load_all(_printed(layer))}
    assert "MutatingAdmissionPolicy" not in kinds and "ValidatingAdmissionPolicy" in kinds
    assert "MutatingAdmissionPolicy" in {d["kind"] for d in yaml.safe_load_all(_printed(None))}
    printed = list(yaml.safe_load_all(_printed(layer, webhooks=True)))
    assert printed == webhook_configurations(Config(), Layout.POD_MUTATIONS)
    # --layout still decides when given.
    named = list(yaml.safe_load_all(_printed(layer, layout="base", webhooks=True)))
    assert named == webhook_configurations(Config(), Layout.BASE)


def test_two_outputs_written_together_stay_apart() -> None:
    """Each document opens with `---`, so `a > f; b >> f` holds both outputs' objects."""
    first, second = _printed(None), _printed(None, webhooks=True)
    together = [d for d in yaml.safe_load_all(first + second) if d]
    assert len(together) == len([d for d in yaml.safe_load_all(first) if d]) + 2


def test_another_prefix_and_service_reach_every_entry() -> None:
    config = Config.model_validate(
        {"annotation_prefix": "accel.example.com/", "certs": {"namespace": "platform"}}
    )
    text = yaml.safe_dump(webhook_configurations(config))
    assert "gpu-admission.io/" not in text
    for configuration in webhook_configurations(config):
        for entry in configuration["webhooks"]:
            assert entry["clientConfig"]["service"]["namespace"] == "platform"
            selector = entry["namespaceSelector"]["matchExpressions"][0]
            assert selector["key"] == "accel.example.com/exempt"

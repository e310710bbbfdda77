"""manifests/base/webhooks.yaml is what `webhook_configurations` makes of the default
configuration (the comments aside), so the self-check's expectation and the shipped file are one
fact; and `admission-policy --webhook-configurations` prints it."""

from __future__ import annotations

import argparse
import io

import yaml

from commands.admission_policy import admission_policy_command
from gpu_admission.config.model import Config
from tests import ROOT
from webhooks.apiserver_policies.webhook_configurations import Layout, webhook_configurations

SHIPPED = ROOT / "manifests" / "base" / "webhooks.yaml"


def test_the_shipped_configurations_are_the_generated_ones() -> None:
    shipped = list(yaml.safe_load_all(SHIPPED.read_text()))
    assert shipped == webhook_configurations(Config())


def test_the_command_prints_them_for_a_layout() -> None:
    out = io.StringIO()
    args = argparse.Namespace(
        config=None,
        webhook_condition=False,
        mutating_webhooks=False,
        webhook_configurations=True,
        layout="webhook-pod-checks",
    )
    assert admission_policy_command(args, out) == 0
    printed = list(yaml.safe_load_all(out.getvalue()))
    assert printed == webhook_configurations(Config(), Layout.POD_CHECKS)
    pods, *_, workloads = printed[1]["webhooks"]
    assert "matchConditions" not in pods  # every pod is judged by the webhook there
    assert workloads["failurePolicy"] == "Fail"
    assert "&id" not in out.getvalue()  # plain YAML, no anchors


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

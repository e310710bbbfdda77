"""The ValidatingAdmissionPolicy as the product prints it: the manifests carry the deployed
config's, a custom config changes its CEL, the webhook's matchCondition is the printed one, and a
pattern's CEL regex matches what fnmatch matches. Whether the real kube-apiserver's CEL agrees
with the Python policies is the real-API tier's (tests/real_api/test_pod_checks.py,
test_cel_agreement.py)."""

from __future__ import annotations

import fnmatch
import re
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from commands.admission_policy import write_admission_policy
from gpu_admission.config.model import Config
from tests.world.harness import installed_config, installed_render
from webhooks.apiserver_policies.cel import glob_regex
from webhooks.apiserver_policies.pod_checks import admission_policy
from webhooks.apiserver_policies.webhook_routing import webhook_condition, webhook_sees

CONFIG = Config()


def _limits(name: str, value: str) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "t", "resources": {"limits": {name: value}}}]}}


def test_the_webhook_sees_claims_and_plain_gpus_over_one_and_only_those() -> None:
    claim_pod = {
        "spec": {
            "containers": [{"name": "t", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        }
    }
    gpu = CONFIG.gpu
    assert webhook_sees(claim_pod, gpu)
    assert webhook_sees(_limits("nvidia.com/gpu", "2"), gpu)  # plain name: the nodes decide
    assert webhook_sees(_limits("nvidia.com/mig-1g.5gb", "3"), gpu)
    assert not webhook_sees(_limits("nvidia.com/gpu", "1"), gpu)
    assert not webhook_sees(_limits("nvidia.com/gpu.shared", "2"), gpu)  # the policy's own case
    assert not webhook_sees(_limits("cpu", "4"), gpu)
    webhooks = installed_render("manifests")
    validating = next(d for d in webhooks if d["kind"] == "ValidatingWebhookConfiguration")
    pods_hook = next(w for w in validating["webhooks"] if w["name"].startswith("pods."))
    (condition,) = pods_hook["matchConditions"]
    assert " ".join(condition["expression"].split()) == webhook_condition(gpu)


def test_the_controller_writes_what_the_command_prints_for_the_deployed_config(tmp_path) -> None:
    """`gpu-admission admission-policy --config DIR` over the base's configuration prints the
    policies the base's controller writes: one generator for both."""
    docs = installed_render("manifests")
    folder = tmp_path / "config"
    installed_config(docs, folder)  # writes the ConfigMap's files, as mounted
    with (tmp_path / "out.yaml").open("w") as out:
        write_admission_policy(folder / "gpu-admission-config", out)
    printed = [d for d in yaml.safe_load_all((tmp_path / "out.yaml").read_text()) if d]
    written = [d for d in docs if d["kind"].endswith(("AdmissionPolicy", "AdmissionPolicyBinding"))]
    assert printed == written


def test_a_custom_config_changes_the_cel() -> None:
    config = Config.model_validate(
        {
            "gpu": {
                "resource_patterns": ["amd.com/gpu*"],
                "companion_resources": [],
                "guarded_env": ["ROCR_VISIBLE_DEVICES"],
                "schedulers": [],
            }
        }
    )
    text = yaml.safe_dump(admission_policy(config))
    assert "amd.com/gpu" in text and "ROCR_VISIBLE_DEVICES" in text
    assert "nvidia.com" not in text


PATTERN_CHARS = "abcnv0123./-_*?[]!^\\'\" "


@settings(max_examples=400, deadline=None)
@given(st.text(PATTERN_CHARS, min_size=1, max_size=10), st.text("abc0./-_[]!^\\", max_size=8))
def test_the_cel_regex_of_a_pattern_matches_what_fnmatch_matches(pattern: str, name: str) -> None:
    # Python's re reads this RE2 subset alike; the real server's CEL runs it in the real-API
    # tier (test_cel_agreement.py).
    assert (re.fullmatch(glob_regex(pattern), name) is not None) is fnmatch.fnmatchcase(
        name, pattern
    )

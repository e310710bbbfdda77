"""The install's self-check, judged offline: what each shipped kustomization installs is found ok
for the API server it is meant for, what a real kube-apiserver 1.36.2 holds for the base is ok
(its defaults ignored), and each way an install goes wrong is named with its fix."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gpu_admission.admission.installed import (
    ADMISSION_KINDS,
    MUTATING_POLICY,
    MUTATING_POLICY_BINDING,
    MUTATING_WEBHOOKS,
    VALIDATING_POLICY,
    VALIDATING_POLICY_BINDING,
    VALIDATING_WEBHOOKS,
    AccountRecord,
    LiveAdmission,
    ObjectState,
    admission_record,
)
from gpu_admission.config.model import Config
from tests import ROOT
from tests.world.harness import installed_render
from webhooks.apiserver_policies.install_expectation import (
    APPLIED_BY_CONTROLLER,
    DELETED_BY_CONTROLLER,
    check_install,
    lacks_credentials,
    layout_of,
)
from webhooks.apiserver_policies.webhook_configurations import Layout

ALL = frozenset(k.kind for k in ADMISSION_KINDS)
NO_MUTATING_POLICY = ALL - {MUTATING_POLICY, MUTATING_POLICY_BINDING}
WEBHOOKS_ONLY = frozenset({MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS})
LIVE = ROOT / "tests" / "fixtures" / "installed-admission" / "base-live-1.36.2.json"
LABEL = "gpu-admission.io/serviceaccount-credentials"


def _live(docs: Any, served: frozenset[str] = ALL, **more: Any) -> LiveAdmission:
    objects = {
        (d["kind"], d["metadata"]["name"]): admission_record(copy.deepcopy(d))
        for d in docs
        if d.get("kind") in ALL
    }
    return LiveAdmission(objects, served, **more)


@pytest.fixture(scope="module")
def real() -> list[dict[str, Any]]:
    return json.loads(LIVE.read_text())["items"]


def _state(report: Any, kind: str, name: str) -> Any:
    return next(o for o in report.objects if (o.kind, o.name) == (kind, name))


@pytest.mark.parametrize(
    ("folder", "served", "layout"),
    [
        ("manifests", ALL, Layout.BASE),
        ("manifests/overlays/webhook-pod-mutations", NO_MUTATING_POLICY, Layout.POD_MUTATIONS),
        ("manifests/overlays/webhook-pod-checks", WEBHOOKS_ONLY, Layout.POD_CHECKS),
        ("manifests/overlays/monitoring", ALL, Layout.BASE),
        ("manifests/overlays/cert-manager", ALL, Layout.BASE),
    ],
)
def test_each_kustomization_is_what_its_server_expects(
    folder: str, served: frozenset[str], layout: Layout
) -> None:
    report = check_install(Config(), _live(installed_render(folder), served))
    assert report.layout == str(layout)
    assert report.problems == []
    assert report.isolation_enforced
    assert len(report.objects) >= 2


def test_what_a_real_api_server_holds_for_the_base_is_ok(real: list[dict[str, Any]]) -> None:
    report = check_install(Config(), _live(real))
    assert [o.message for o in report.problems] == []
    assert len(report.objects) == len(real) == 14


def test_a_missing_visibility_policy_is_named_with_what_it_leaves_undone(
    real: list[dict[str, Any]],
) -> None:
    docs = [d for d in real if d["kind"] != MUTATING_POLICY]
    report = check_install(Config(), _live(docs))
    (missing,) = report.problems
    assert (missing.kind, missing.name, missing.state) == (
        MUTATING_POLICY,
        "gpu-admission-gpu-visibility",
        ObjectState.MISSING,
    )
    assert missing.reason == "AdmissionObjectMissing"
    assert "NVIDIA_VISIBLE_DEVICES=none" in missing.detail
    assert missing.fix == APPLIED_BY_CONTROLLER
    assert not report.isolation_enforced


def test_an_edited_match_condition_and_an_audit_binding_are_stale(
    real: list[dict[str, Any]],
) -> None:
    docs = copy.deepcopy(real)
    mutating = next(d for d in docs if d["kind"] == MUTATING_WEBHOOKS)
    mutating["webhooks"][0]["matchConditions"][1]["expression"] = "true"
    binding = next(
        d
        for d in docs
        if d["kind"] == VALIDATING_POLICY_BINDING and d["metadata"]["name"] == "gpu-admission-pods"
    )
    binding["spec"]["validationActions"] = ["Audit"]
    report = check_install(Config(), _live(docs))
    found = {(o.kind, o.name): o for o in report.problems}
    assert set(found) == {
        (MUTATING_WEBHOOKS, "gpu-admission"),
        (VALIDATING_POLICY_BINDING, "gpu-admission-pods"),
    }
    webhooks = found[(MUTATING_WEBHOOKS, "gpu-admission")]
    assert webhooks.state is ObjectState.STALE and webhooks.reason == "AdmissionObjectStale"
    assert webhooks.detail.startswith("webhooks[0].matchConditions[1].expression is")
    assert "not sent to gpu-admission" in webhooks.detail
    audit = found[(VALIDATING_POLICY_BINDING, "gpu-admission-pods")]
    assert 'spec.validationActions[0] is "Audit", expected "Deny"' in audit.detail
    assert report.isolation_enforced  # neither carries GPU visibility


def test_a_selector_someone_added_is_stale_and_a_default_is_not(
    real: list[dict[str, Any]],
) -> None:
    docs = copy.deepcopy(real)
    validating = next(d for d in docs if d["kind"] == VALIDATING_WEBHOOKS)
    validating["webhooks"][1]["objectSelector"] = {"matchLabels": {"team": "a"}}
    validating["webhooks"][2]["matchConditions"][0]["expression"] = " ".join(
        validating["webhooks"][2]["matchConditions"][0]["expression"].split(" ")
    ).replace(" && ", "\n&&  ")  # re-spaced as YAML folding may
    report = check_install(Config(), _live(docs))
    (stale,) = report.problems
    assert stale.detail.startswith('webhooks[1].objectSelector is {"matchLabels": {"team": "a"}}')
    assert "which the configuration does not set" in stale.detail


def test_another_configuration_against_the_default_install_is_found(
    real: list[dict[str, Any]],
) -> None:
    config = Config.model_validate({"gpu": {"guarded_env": ["ROCR_VISIBLE_DEVICES"]}})
    report = check_install(config, _live(real))
    stale = {(o.kind, o.name) for o in report.problems}
    assert (VALIDATING_POLICY, "gpu-admission-pods") in stale
    assert (MUTATING_WEBHOOKS, "gpu-admission") in stale  # its routing names the env too
    pods = _state(report, VALIDATING_POLICY, "gpu-admission-pods")
    assert "ROCR_VISIBLE_DEVICES" in pods.detail
    assert pods.fix == APPLIED_BY_CONTROLLER
    webhooks = _state(report, MUTATING_WEBHOOKS, "gpu-admission")
    assert webhooks.fix == APPLIED_BY_CONTROLLER


def test_a_split_mode_leaves_no_leftover_unnamed(real: list[dict[str, Any]]) -> None:
    config = Config.model_validate({"policies": {"shared-gpu-limit": {"mode": "warn"}}})
    report = check_install(config, _live(real))
    missing = {o.name for o in report.problems if o.state is ObjectState.MISSING}
    assert {"gpu-admission-gpu-env-guard", "gpu-admission-shared-gpu-limit"} <= missing
    leftover = _state(report, VALIDATING_POLICY, "gpu-admission-pods")
    assert leftover.state is ObjectState.STALE
    assert leftover.fix == DELETED_BY_CONTROLLER


def test_without_the_controllers_writes_each_fix_is_the_command_that_applies_it(
    real: list[dict[str, Any]],
) -> None:
    config = Config.model_validate(
        {
            "install": {"write_admission_objects": False},
            "policies": {"shared-gpu-limit": {"mode": "warn"}},
        }
    )
    docs = [d for d in real if d["kind"] != MUTATING_WEBHOOKS]
    report = check_install(config, _live(docs))
    fixes = {(o.kind, o.name): o.fix for o in report.problems}
    apply = "kubectl apply --server-side --field-manager gpu-admission-controller -f -"
    assert fixes[(VALIDATING_POLICY, "gpu-admission-shared-gpu-limit")] == (
        f"gpu-admission admission-policy --config DIR | {apply}"
    )
    assert fixes[(MUTATING_WEBHOOKS, "gpu-admission")] == (
        f"gpu-admission admission-policy --config DIR --webhook-configurations | {apply}"
    )
    assert fixes[(VALIDATING_POLICY, "gpu-admission-pods")] == (
        "kubectl delete ValidatingAdmissionPolicy gpu-admission-pods"
    )


def test_the_base_on_an_older_server_is_named_as_such() -> None:
    docs = [d for d in installed_render("manifests") if not d["kind"].startswith(MUTATING_POLICY)]
    report = check_install(Config(), _live(docs, NO_MUTATING_POLICY))
    assert report.layout == "manifests/overlays/webhook-pod-mutations/"
    webhooks = _state(report, MUTATING_WEBHOOKS, "gpu-admission")
    assert webhooks.state is ObjectState.STALE
    assert "it routes pods as on an API server that serves MutatingAdmissionPolicy" in (
        webhooks.detail
    )
    assert webhooks.fix == APPLIED_BY_CONTROLLER
    assert not report.isolation_enforced
    guards = {o.name for o in report.problems if o.kind == VALIDATING_POLICY}
    assert guards == {
        "gpu-admission-serviceaccount-credentials",
        "gpu-admission-credential-namespaces",
    }


def test_the_layout_follows_what_the_server_serves() -> None:
    assert layout_of(ALL) is Layout.BASE
    assert layout_of(NO_MUTATING_POLICY) is Layout.POD_MUTATIONS
    assert layout_of(WEBHOOKS_ONLY) is Layout.POD_CHECKS


def test_bound_accounts_in_unrouted_namespaces_are_found(real: list[dict[str, Any]]) -> None:
    accounts = [
        AccountRecord("off", "trainer", "s3, gcs"),
        AccountRecord("unlabelled", "etl", "s3"),
        AccountRecord("routed", "trainer", "s3"),
        AccountRecord("exempt", "system", "s3"),
        AccountRecord("off", "empty", " , "),  # names nothing: binds nothing
    ]
    labels = {
        "off": {LABEL: "false"},
        "unlabelled": {},
        "routed": {LABEL: "true"},
        "exempt": {"gpu-admission.io/exempt": "true"},
    }
    live = _live(real, namespace_labels=labels, accounts=accounts)
    found = check_install(Config(), live).credentials
    assert [(f.namespace, f.service_account, f.secrets) for f in found] == [
        ("off", "trainer", ("s3", "gcs")),
        ("unlabelled", "etl", ("s3",)),
    ]
    assert found[0].fix == f"kubectl label namespace off {LABEL}=true --overwrite"
    assert found[0].fix in found[0].message
    # Older servers route every pod: nothing to find.
    older = _live(real, NO_MUTATING_POLICY, namespace_labels=labels, accounts=accounts)
    assert check_install(Config(), older).credentials == ()


def test_a_pod_lacks_credentials_unless_it_holds_one_or_opted_out() -> None:
    config = Config()
    bare: dict[str, Any] = {"spec": {"containers": [{"name": "c"}]}}
    assert lacks_credentials(bare, ("s3",), config)
    from_env = {
        "spec": {
            "containers": [
                {"name": "c", "env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "s3"}}}]}
            ]
        }
    }
    assert not lacks_credentials(from_env, ("s3",), config)
    mounted = {"spec": {"volumes": [{"name": "v", "secret": {"secretName": "gcs"}}]}}
    assert not lacks_credentials(mounted, ("s3", "gcs"), config)
    opted_out = {
        "metadata": {"annotations": {"gpu-admission.io/inject-cloud-credentials": "false"}},
        **bare,
    }
    assert not lacks_credentials(opted_out, ("s3",), config)

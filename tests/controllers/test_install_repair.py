"""What the leading controller writes of the install's admission objects, planned from a report:
the missing and the stale applied as implied, a leftover of ours deleted, an object as implied
but not yet the controller's taken over, and nothing for what is already right."""

from __future__ import annotations

from typing import Any

from controllers.install_check.checker import written_message
from controllers.install_check.repair import (
    NOT_OWNED,
    OWNER,
    Action,
    Write,
    owned,
    path_of,
    replacement,
    writes,
)
from gpu_admission.admission.installed import (
    InstallReport,
    ObjectFinding,
    ObjectState,
    admission_record,
)
from gpu_admission.config.model import Config
from gpu_admission.names import MANAGED_BY, MANAGED_BY_LABEL
from webhooks.apiserver_policies.install_expectation import expected_objects
from webhooks.apiserver_policies.webhook_configurations import Layout

IMPLIED = {e.key: e.obj for e in expected_objects(Config(), Layout.BASE)}
MAP = ("MutatingAdmissionPolicy", "gpu-admission-gpu-visibility")
PODS = ("ValidatingAdmissionPolicy", "gpu-admission-pods")
WEBHOOKS = ("MutatingWebhookConfiguration", "gpu-admission")
LEFTOVER = ("ValidatingAdmissionPolicy", "gpu-admission-shared-gpu-limit")
OWNER_REF = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": OWNER[0],
    "name": OWNER[1],
    "uid": "6c8e3f0e-role",
}


def _live(key: tuple[str, str], *, owner: bool) -> dict[str, Any]:
    obj = {**IMPLIED[key], "metadata": {"name": key[1]}}
    if owner:
        obj["metadata"]["ownerReferences"] = [OWNER_REF]
    return admission_record(obj)


def _finding(key: tuple[str, str], state: ObjectState) -> ObjectFinding:
    return ObjectFinding(*key, state)


def test_each_state_gets_its_write_and_what_is_right_gets_none() -> None:
    report = InstallReport(
        "manifests/",
        (
            _finding(MAP, ObjectState.MISSING),
            _finding(PODS, ObjectState.STALE),
            _finding(WEBHOOKS, ObjectState.OK),
            _finding(("ValidatingAdmissionPolicy", "gpu-admission-workloads"), ObjectState.OK),
            _finding(LEFTOVER, ObjectState.STALE),
        ),
    )
    live = {
        PODS: _live(PODS, owner=True),
        WEBHOOKS: _live(WEBHOOKS, owner=False),  # applied by an earlier release's kustomization
        ("ValidatingAdmissionPolicy", "gpu-admission-workloads"): _live(
            ("ValidatingAdmissionPolicy", "gpu-admission-workloads"), owner=True
        ),
        LEFTOVER: {"metadata": {"name": LEFTOVER[1]}},
    }
    assert writes(report, IMPLIED, live) == [
        Write(Action.APPLY, *MAP, IMPLIED[MAP], ObjectState.MISSING),
        Write(Action.APPLY, *PODS, IMPLIED[PODS], ObjectState.STALE),
        Write(Action.APPLY, *WEBHOOKS, IMPLIED[WEBHOOKS], NOT_OWNED),
        Write(Action.DELETE, *LEFTOVER, None, ObjectState.STALE),
    ]


def test_a_report_with_everything_right_and_owned_plans_nothing() -> None:
    keys = list(IMPLIED)
    report = InstallReport("manifests/", tuple(_finding(k, ObjectState.OK) for k in keys))
    live = {k: _live(k, owner=True) for k in keys}
    assert writes(report, IMPLIED, live) == []


def test_what_is_applied_is_labelled_and_owned_and_carries_no_ca_bundle() -> None:
    webhooks = IMPLIED[WEBHOOKS]
    applied = owned(webhooks, OWNER_REF)
    assert applied["metadata"]["labels"] == {MANAGED_BY_LABEL: MANAGED_BY}
    assert applied["metadata"]["ownerReferences"] == [OWNER_REF]
    assert all("caBundle" not in w["clientConfig"] for w in applied["webhooks"])
    assert "labels" not in webhooks["metadata"]  # the implied object is left as it was
    assert "ownerReferences" not in owned(webhooks, None)["metadata"]


def test_each_kind_has_its_path() -> None:
    assert path_of(*MAP) == (
        "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/gpu-admission-gpu-visibility"
    )
    assert path_of(*WEBHOOKS).endswith("/mutatingwebhookconfigurations/gpu-admission")


def test_a_replacement_keeps_the_ca_bundles_and_the_version_it_read() -> None:
    webhooks = owned(IMPLIED[WEBHOOKS], OWNER_REF)
    live = {
        "metadata": {"name": "gpu-admission", "resourceVersion": "4711"},
        "webhooks": [
            {"name": w["name"], "clientConfig": {"caBundle": f"CA-{i}"}}
            for i, w in enumerate(webhooks["webhooks"])
        ]
        + [{"name": "left.by-kubectl.io", "clientConfig": {"caBundle": "old"}}],
    }
    replaced = replacement(webhooks, live)
    assert replaced["metadata"]["resourceVersion"] == "4711"
    assert [w["clientConfig"]["caBundle"] for w in replaced["webhooks"]] == [
        f"CA-{i}" for i in range(len(webhooks["webhooks"]))
    ]
    assert [w["name"] for w in replaced["webhooks"]] == [w["name"] for w in webhooks["webhooks"]]
    assert "caBundle" not in webhooks["webhooks"][0]["clientConfig"]  # the body is left as it was


def test_the_event_says_the_repairs_first_then_what_was_only_taken_over() -> None:
    done = [
        Write(Action.APPLY, *PODS, IMPLIED[PODS], NOT_OWNED),
        Write(Action.APPLY, *MAP, IMPLIED[MAP], ObjectState.MISSING),
        Write(Action.DELETE, *LEFTOVER, None, ObjectState.STALE),
    ]
    assert written_message(done) == (
        "The install's admission objects, put as the configuration implies them: "
        "MutatingAdmissionPolicy gpu-admission-gpu-visibility applied (it was missing); "
        "ValidatingAdmissionPolicy gpu-admission-shared-gpu-limit deleted (it was stale); "
        "taken over as they were (not yet owned by the controller): "
        "ValidatingAdmissionPolicy gpu-admission-pods"
    )
